/* cmd_train.c -- `tandem train CONFIG.yaml [key=value ...]`. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "config/train_config.h"
#include "core/core.h"
#include "trainer/job.h"

int tn_cmd_train(int argc, char **argv) {
    if (argc < 1) {
        fprintf(stderr, "tandem: error: train needs a config file: tandem train CONFIG.yaml [key=value ...]\n");
        return 1;
    }
    static tn_train_config cfg;
    int rc = tn_train_config_load(argv[0], &cfg);
    for (int i = 1; i < argc && rc == 0; i++) {
        if (!strchr(argv[i], '=')) {
            rc = tn_err("command line: '%s' is not key=value", argv[i]);
            break;
        }
        rc = tn_train_config_override(&cfg, argv[i]);
    }
    if (rc == 0) rc = tn_train_config_finish(&cfg);
    if (rc == 0) rc = tn_job_train(&cfg);
    if (rc != 0) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        return 1;
    }
    return 0;
}
