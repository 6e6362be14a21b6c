/*
 * refcount.c — the count of an object's holders (see refcount.h): atomic,
 * so that the side that lets go last sees everything the other side wrote
 * before it let go, and frees.
 */
#include "server/core/refcount.h"

#include "common/check.h"

/* Made by one thread before any other sees the object: no ordering yet. */
void refcount_init(refcount *rc, int holders)
{
    ONCE_ASSERT(holders > 0);
    rc->holders = holders;
}

/* A holder adds another (a stream taking over the answer): the count can
 * only grow from a live object, so the object cannot be freed meanwhile. */
void refcount_hold(refcount *rc)
{
    int n = __atomic_add_fetch(&rc->holders, 1, __ATOMIC_ACQ_REL);
    ONCE_ASSERT(n > 1); /* a hold on an object nobody held */
    (void)n;
}

/* Release-acquire: the writes each holder made before its drop are seen by
 * whichever drops last and frees. */
int refcount_drop(refcount *rc)
{
    int left = __atomic_sub_fetch(&rc->holders, 1, __ATOMIC_ACQ_REL);
    ONCE_ASSERT(left >= 0); /* a drop without its hold */
    return left == 0;
}
