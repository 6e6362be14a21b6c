/*
 * worker.h — worker threads for the calls an HTTP thread must not make:
 * synchronous commits (a human's resolve, inbox claims), reads that build
 * large answers (lists, records), and calls that block (an approved MCP
 * call over once's own session).
 */
#ifndef ONCE_SERVER_CORE_WORKER_H
#define ONCE_SERVER_CORE_WORKER_H

typedef struct worker worker;

int worker_start(worker **out);
void worker_stop(worker *w); /* runs what is queued, then refuses new jobs */
void worker_free(worker *w); /* after the HTTP daemons stopped */
/* Runs fn(arg) on a worker thread. 0, or -1 (stopping, out of memory): fn
 * will not run. */
int worker_run(worker *w, void (*fn)(void *), void *arg);

#endif
