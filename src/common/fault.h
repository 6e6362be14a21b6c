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
 * upstream client), before_sync (a batch committed; the syncer is about to
 * fdatasync the WAL: nobody has heard).
 *
 * Two more switches for tests that must hold a moment open rather than
 * end the process: FAULT_DELAY("name") sleeps for the milliseconds
 * ONCE_FAULT_DELAY gives as "name:MS", and FAULT_FAILS("name") is true when
 * ONCE_FAULT_FAIL names the point (the caller then fails as the real error
 * would). Point: before_sync for both, and ckpt_sync for FAULT_FAILS (the
 * checkpointer's sync of the database after a pass).
 */
#ifndef ONCE_COMMON_FAULT_H
#define ONCE_COMMON_FAULT_H

#ifdef ONCE_FAULT_INJECTION
void fault_point(const char *name);
void fault_delay(const char *name);
int fault_fails(const char *name);
#define FAULT_POINT(name) fault_point(name)
#define FAULT_DELAY(name) fault_delay(name)
#define FAULT_FAILS(name) fault_fails(name)
#else
#define FAULT_POINT(name) ((void)0)
#define FAULT_DELAY(name) ((void)0)
#define FAULT_FAILS(name) 0
#endif

#endif
