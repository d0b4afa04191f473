/* sync_mode_mix.c -- compiled by tests/cli/test_sync_types.sh: with -DMIX the config's sync mode goes where
 * the gradient exchange's mode belongs, which must not compile (-Wextra's -Wenum-conversion under -Werror);
 * without it the same call with the right type must compile (so the failure is the mix, not the file). */
#include "config/train_config.h"
#include "trainer/grad_sync.h"

tn_grad_sync *mixed(tn_comm *c, tn_model *m);
tn_grad_sync *mixed(tn_comm *c, tn_model *m) {
#ifdef MIX
    return tn_grad_sync_create(c, m, 1 << 20, TN_SYNC_DILOCO);
#else
    return tn_grad_sync_create(c, m, 1 << 20, TN_GRAD_LOCAL);
#endif
}
