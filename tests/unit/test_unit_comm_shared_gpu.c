/* test_unit_comm_shared_gpu -- which ranks share a GPU (comm_impl.h tn_comm_first_shared_device), decided by PCI bus
 * id: schedulers set CUDA_VISIBLE_DEVICES per rank, so every rank's device ordinal is 0 while the GPUs differ (NCCL
 * must not be refused then); two ranks whose bus ids match share one GPU whatever their ordinals. Ranks are faked
 * as the gathered records tn_comm_attach_device builds. */
#include <stdio.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "testlib.h"

static tn_comm_dev_id rank_on(int node, int device, const char *bus) {
    tn_comm_dev_id d;
    memset(&d, 0, sizeof d);
    d.has = 1, d.node = node, d.device = device;
    snprintf(d.bus, sizeof d.bus, "%s", bus);
    return d;
}

int main(void) {
    /* CUDA_VISIBLE_DEVICES=0 and =1: both see ordinal 0, on different GPUs */
    tn_comm_dev_id a[4] = {rank_on(0, 0, "0000:1B:00.0"), rank_on(0, 0, "0000:3D:00.0")};
    CHECK(tn_comm_first_shared_device(a, 2) == -1);
    /* the same GPU under two ordinals (two visible lists naming it at different positions): shared; case of the
     * hex digits does not matter */
    a[0] = rank_on(0, 1, "0000:1b:00.0"), a[1] = rank_on(0, 0, "0000:1B:00.0");
    CHECK(tn_comm_first_shared_device(a, 2) == 1);
    /* equal bus ids on different machines: different GPUs */
    a[0] = rank_on(0, 0, "0000:1B:00.0"), a[1] = rank_on(1, 0, "0000:1B:00.0");
    CHECK(tn_comm_first_shared_device(a, 2) == -1);
    /* four ranks, two machines: the first rank sharing is named */
    a[0] = rank_on(0, 0, "0000:1B:00.0"), a[1] = rank_on(0, 0, "0000:3D:00.0");
    a[2] = rank_on(1, 0, "0000:1B:00.0"), a[3] = rank_on(1, 0, "0000:1B:00.0");
    CHECK(tn_comm_first_shared_device(a, 4) == 3);
    /* bus id unknown on one side: the ordinals decide */
    a[0] = rank_on(0, 0, ""), a[1] = rank_on(0, 0, "0000:3D:00.0");
    CHECK(tn_comm_first_shared_device(a, 2) == 1);
    a[1] = rank_on(0, 1, "");
    CHECK(tn_comm_first_shared_device(a, 2) == -1);
    /* CPU ranks share nothing */
    a[0].has = a[1].has = 0, a[1].device = 0;
    CHECK(tn_comm_first_shared_device(a, 2) == -1);
    return tl_done("test_unit_comm_shared_gpu");
}
