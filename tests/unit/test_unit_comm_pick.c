/* test_unit_comm_pick -- which queued ops the progress thread steps together (tn_comm_pick, comm_impl.h),
 * on hand-built queues whose answers are worked out below from the rule: an op runs when every earlier
 * unfinished op sharing a shard with it runs and drains; no shards = every shard; at most TN_COMM_LANES
 * submission numbers from the oldest unfinished op. */
#include <string.h>

#include "comm/comm_impl.h"
#include "testlib.h"

enum { N = 24 };
static tn_comm_op q[N];
static int drains[N];

static int draining(const tn_comm_op *op) { return drains[op - q]; }

/* A queue of n ops, shards[k] each (0 = none named), none draining, none done. */
static void queue(int n, const uint64_t *shards) {
    memset(q, 0, sizeof q);
    memset(drains, 0, sizeof drains);
    for (int k = 0; k < n; k++) {
        q[k].seq = 100 + (uint64_t)k, q[k].shards = shards[k], q[k].draining = draining;
        q[k].next = k + 1 < n ? &q[k + 1] : NULL;
    }
}

/* The picked ops as queue positions, "0 2 5". */
static const char *picked(void) {
    static char out[128];
    tn_comm_op *run[TN_COMM_LANES];
    int n = tn_comm_pick(&q[0], run), len = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) len += snprintf(out + len, sizeof out - (size_t)len, i ? " %d" : "%d", (int)(run[i] - q));
    return out;
}

#define PICKS(want) CHECKF(strcmp(picked(), want) == 0, "picked '%s', expected '%s'", picked(), want)

int main(void) {
    /* ops without shards: strictly in order, the next one only while the one before drains */
    uint64_t none[4] = {0, 0, 0, 0};
    queue(4, none);
    PICKS("0");
    drains[0] = 1;
    PICKS("0 1");
    drains[1] = 1;
    PICKS("0 1 2");
    q[1].done = 1; /* finished ops are skipped, the chain goes on */
    PICKS("0 2");

    /* two ranks' shards: buckets of shard 1 (bit 1) queued before those of shard 0 (bit 0), as backward makes
     * them; the first of each shard runs at once, the rest of a shard waits for its predecessor to drain */
    uint64_t two[5] = {2, 2, 1, 1, 3};
    queue(5, two);
    PICKS("0 2");
    drains[0] = 1; /* op 1 may follow op 0; op 3 still waits for op 2; op 4 (both shards) for op 3 too */
    PICKS("0 1 2");
    drains[2] = 1, drains[1] = 1;
    PICKS("0 1 2 3");
    drains[3] = 1; /* every earlier op on shards 0 and 1 drains: the straddling op runs */
    PICKS("0 1 2 3 4");

    /* an op naming no shards is a barrier: nothing after it overtakes it, it waits for everything before */
    uint64_t barrier[4] = {2, 0, 1, 1};
    queue(4, barrier);
    PICKS("0");
    drains[0] = 1;
    PICKS("0 1");

    /* a waiting op holds its shards: the later op on shard 0 must not overtake op 1 (shards 0 and 1) */
    uint64_t hold[3] = {2, 3, 1};
    queue(3, hold);
    PICKS("0");

    /* never more than TN_COMM_LANES submission numbers from the oldest unfinished op (message tags) */
    uint64_t many[N];
    for (int k = 0; k < N; k++) many[k] = 1ull << k;
    queue(N, many);
    char want[128] = "";
    for (int k = 0, len = 0; k < TN_COMM_LANES; k++) len += snprintf(want + len, sizeof want - (size_t)len, k ? " %d" : "%d", k);
    PICKS(want);
    return tl_done("test_unit_comm_pick");
}
