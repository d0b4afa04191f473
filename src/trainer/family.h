/* family -- which training job a config runs: each model family (language models, image classifiers) says whether a
 * model config.json is its own and trains it; `tandem train` asks here instead of knowing model types by name. */
#ifndef TN_FAMILY_H
#define TN_FAMILY_H

#include <stdint.h>

#include "comm/comm.h"
#include "config/train_config.h"

typedef struct {
    const char *name;                                     /* "language model", "image classifier" */
    int (*claims)(const char *config_json_path);          /* 1 when the config is this family's */
    int (*train)(const tn_train_config *cfg, tn_comm *comm, uint64_t config_fingerprint); /* as tn_job_train */
} tn_model_family;

/* The family of cfg's model (model_config, or model_name_or_path/config.json); the language-model family when no
 * other claims it. */
const tn_model_family *tn_model_family_of(const tn_train_config *cfg);
/* tn_model_family_of(cfg)->train, after refusing keys that family does not implement (one line naming the key). */
int tn_family_train(const tn_train_config *cfg, tn_comm *comm, uint64_t config_fingerprint);

/* The image-classifier job (trainer/image_job.c). */
int tn_image_job_train(const tn_train_config *cfg, tn_comm *comm, uint64_t config_fingerprint);

#endif
