/* family -- see family.h. */
#include "trainer/family.h"

#include <stdlib.h>

#include "core/core.h"
#include "model/resnet.h"
#include "trainer/job.h"

static int claims_none(const char *path) { return (void)path, 0; }

static const tn_model_family FAMILIES[] = {
    {"image classifier", tn_is_resnet_config, tn_image_job_train},
    {"language model", claims_none, tn_job_train}, /* the default: last */
};
#define N_FAMILIES ((int)(sizeof FAMILIES / sizeof *FAMILIES))

const tn_model_family *tn_model_family_of(const tn_train_config *cfg) {
    char *path = cfg->model_config[0] ? tn_xstrdup(cfg->model_config) : tn_path_join(cfg->model_name_or_path, "config.json");
    const tn_model_family *f = &FAMILIES[N_FAMILIES - 1];
    for (int i = 0; i < N_FAMILIES - 1; i++)
        if (FAMILIES[i].claims(path)) {
            f = &FAMILIES[i];
            break;
        }
    free(path);
    return f;
}

int tn_family_train(const tn_train_config *cfg, tn_comm *comm, uint64_t config_fingerprint) {
    const tn_model_family *f = tn_model_family_of(cfg);
    if (f->train == tn_job_train && cfg->optim_sgd)
        return tn_err("%s: key 'optim': sgd trains image classifiers; a language model trains with adamw_torch",
                      cfg->source_path);
    if (f->train == tn_job_train && cfg->sync_bn)
        return tn_err("%s: key 'sync_bn': batch norm belongs to image classifiers; a language model has none",
                      cfg->source_path);
    return f->train(cfg, comm, config_fingerprint);
}
