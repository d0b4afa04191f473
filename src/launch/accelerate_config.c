/* accelerate_config.c -- see accelerate_config.h. */
#include "launch/accelerate_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/core.h"

static void note(tn_accelerate_config *a, const char *file, const char *fmt, ...) TN_PRINTF(3, 4);
static void note(tn_accelerate_config *a, const char *file, const char *fmt, ...) {
    size_t used = strlen(a->notes);
    if (used + 2 >= sizeof a->notes) return;
    snprintf(a->notes + used, sizeof a->notes - used, "accelerate %s: ", file);
    used = strlen(a->notes);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->notes + used, sizeof a->notes - used - 1, fmt, ap);
    va_end(ap);
    strcat(a->notes, "\n");
}

/* The scalar at key in mapping node m (NULL when absent or not a scalar). */
static const char *get(yaml_document_t *d, yaml_node_t *m, const char *key, yaml_node_t **child) {
    if (child) *child = NULL;
    if (!m || m->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(d, p->key), *v = yaml_document_get_node(d, p->value);
        if (!k || k->type != YAML_SCALAR_NODE || strcmp((const char *)k->data.scalar.value, key) != 0) continue;
        if (child) *child = v;
        return v && v->type == YAML_SCALAR_NODE ? (const char *)v->data.scalar.value : NULL;
    }
    return NULL;
}

static int fsdp_stage(const char *s) {
    static const char *const names[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
    static const int stages[] = {3, 2, 0, 3, 2};
    for (int i = 0; i < 5; i++) /* by name, or by torch's ShardingStrategy number 1..5 */
        if (strcmp(s, names[i]) == 0 || (s[0] == '1' + i && !s[1])) return stages[i];
    return -1;
}

int tn_accelerate_config_parse(const char *text, const char *path, tn_accelerate_config *a) {
    memset(a, 0, sizeof *a);
    a->zero_stage = -1;
    const char *slash = strrchr(path, '/'), *file = slash ? slash + 1 : path;
    yaml_parser_t p;
    yaml_document_t d;
    if (!yaml_parser_initialize(&p)) tn_die("out of memory creating a YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
    if (!yaml_parser_load(&p, &d)) {
        int line = (int)p.problem_mark.line + 1;
        yaml_parser_delete(&p);
        return tn_err("%s:%d: not valid YAML (%s)", path, line, p.problem ? p.problem : "parse error");
    }
    yaml_parser_delete(&p);
    yaml_node_t *root = yaml_document_get_root_node(&d), *sub;
    int rc = 0;
    if (!root || root->type != YAML_MAPPING_NODE) {
        rc = tn_err("%s: expected a mapping of accelerate settings (compute_environment, distributed_type, ...)", path);
        goto out;
    }
    const char *v = get(&d, root, "num_processes", NULL);
    if (v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 1 || n > 65536) {
            rc = tn_err("%s: key 'num_processes': '%s' is not a number of processes in 1..65536", path, v);
            goto out;
        }
        a->num_processes = (int)n;
    }
    const char *type = get(&d, root, "distributed_type", NULL);
    if (type && strcmp(type, "FSDP") == 0) {
        get(&d, root, "fsdp_config", &sub);
        const char *s = get(&d, sub, "fsdp_sharding_strategy", NULL);
        a->zero_stage = s ? fsdp_stage(s) : 3; /* accelerate's default: FULL_SHARD */
        if (a->zero_stage < 0) {
            rc = tn_err("%s: key 'fsdp_config.fsdp_sharding_strategy': '%s' is not FULL_SHARD, SHARD_GRAD_OP, "
                        "NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2", path, s);
            goto out;
        }
        note(a, file, "FSDP %s: ZeRO stage %d (tandem shards per decoder layer)", s ? s : "(FULL_SHARD)", a->zero_stage);
        const char *off = get(&d, sub, "fsdp_offload_params", NULL);
        if (off && strcmp(off, "true") == 0) note(a, file, "fsdp_offload_params: tandem's CPU backend keeps every state in host memory");
    } else if (type && strcmp(type, "DEEPSPEED") == 0) {
        get(&d, root, "deepspeed_config", &sub);
        const char *s = get(&d, sub, "zero_stage", NULL);
        a->zero_stage = s ? atoi(s) : 0;
        if (s && (strlen(s) != 1 || s[0] < '0' || s[0] > '3')) {
            rc = tn_err("%s: key 'deepspeed_config.zero_stage': '%s' is not 0, 1, 2 or 3", path, s);
            goto out;
        }
        note(a, file, "DeepSpeed: ZeRO stage %d", a->zero_stage);
    } else if (type && strcmp(type, "MULTI_GPU") && strcmp(type, "MULTI_CPU") && strcmp(type, "NO")) {
        rc = tn_err("%s: key 'distributed_type': '%s' is not one tandem runs (FSDP, DEEPSPEED, MULTI_GPU, MULTI_CPU, NO)",
                    path, type);
        goto out;
    }
    v = get(&d, root, "num_machines", NULL);
    if (v && atoi(v) > 1)
        note(a, file, "num_machines %s: start the machines with --hostfile, or with NNODES/NODE_RANK on each", v);
    v = get(&d, root, "mixed_precision", NULL);
    if (v && strcmp(v, "no") != 0) note(a, file, "mixed_precision %s: the CPU backend computes in fp32", v);
out:
    yaml_document_delete(&d);
    return rc;
}

int tn_accelerate_config_load(const char *path, tn_accelerate_config *a) {
    char *text = tn_read_file(path, NULL, 1 << 20);
    if (!text) return -1;
    int rc = tn_accelerate_config_parse(text, path, a);
    free(text);
    return rc;
}
