/*
 * fault.h — deterministic crash points for the chaos suite.
 *
 * In a build configured with -DONCE_FAULT_INJECTION=ON, FAULT_POINT("name")
 * kills the process with SIGKILL when the environment variable ONCE_FAULT
 * names that point (optionally "name:N" — on its Nth passage). In every
 * other build it compiles to nothing, so production binaries carry no
 * crash switch.
 *
 * Points: before_commit (a group commit is about to COMMIT), after_commit
 * (it committed; no caller has heard), after_reserve (a reservation is
 * durable; the upstream call has not started), after_upstream (the
 * upstream answered; the outcome is not recorded), after_record (the outcome
 * is durable; the caller has not heard), before_delivery (a webhook delivery
 * is about to be sent), during_delivery (the delivery was handed to the
 * upstream client).
 */
#ifndef ONCE_COMMON_FAULT_H
#define ONCE_COMMON_FAULT_H

#ifdef ONCE_FAULT_INJECTION
void fault_point(const char *name);
#define FAULT_POINT(name) fault_point(name)
#else
#define FAULT_POINT(name) ((void)0)
#endif

#endif
