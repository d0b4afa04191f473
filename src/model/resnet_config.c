/* resnet_config -- config.json of a torchvision-style ResNet (model_type "resnet"), keys as
 * ../shared/ref/make_resnet_fixture.py writes them: block, layers, base_width, num_classes, in_channels, image_size,
 * bn_eps, bn_momentum. A bad or missing key is one line naming the file and the key. */
#include "model/resnet.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static int int_key(const cJSON *root, const char *path, const char *key, int def, int lo, int hi, int *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j) {
        if (def < 0) return tn_err("%s: missing key '%s'", path, key);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) || j->valuedouble < lo || j->valuedouble > hi)
        return tn_err("%s: key '%s': expected an integer in %d..%d", path, key, lo, hi);
    *out = (int)j->valuedouble;
    return 0;
}

static int num_key(const cJSON *root, const char *path, const char *key, double def, double lo, double hi,
                   double *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = def;
    if (!j) return 0;
    if (!cJSON_IsNumber(j) || !(j->valuedouble > lo) || !(j->valuedouble < hi))
        return tn_err("%s: key '%s': expected a number in (%g, %g)", path, key, lo, hi);
    *out = j->valuedouble;
    return 0;
}

static int parse_layers(const cJSON *root, const char *path, tn_resnet_config *c) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!j) return tn_err("%s: missing key 'layers' (blocks per stage, e.g. [2, 2, 2, 2] for ResNet-18)", path);
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 4)
        return tn_err("%s: key 'layers': expected 4 block counts, e.g. [2, 2, 2, 2] (ResNet-18) or [3, 4, 6, 3]", path);
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetArrayItem(j, i);
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 || v->valuedouble > 64)
            return tn_err("%s: key 'layers': entry %d is not a block count in 1..64", path, i);
        c->layers[i] = (int)v->valuedouble;
    }
    return 0;
}

int tn_resnet_config_parse(const char *json_text, const char *path, tn_resnet_config *c) {
    memset(c, 0, sizeof *c);
    cJSON *root = cJSON_Parse(json_text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return tn_err("%s: not a JSON object", path);
    }
    int rc = 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "block");
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "resnet") != 0)
        rc = tn_err("%s: key 'model_type': expected \"resnet\"", path);
    else if (b && (!cJSON_IsString(b) || strcmp(b->valuestring, "basic") != 0))
        rc = tn_err("%s: key 'block': only \"basic\" (ResNet-18/34) is supported; bottleneck blocks (ResNet-50 and up) "
                    "are not", path);
    else if (parse_layers(root, path, c) || int_key(root, path, "base_width", 64, 1, 4096, &c->base_width) ||
             int_key(root, path, "num_classes", -1, 1, 1 << 20, &c->num_classes) ||
             int_key(root, path, "in_channels", 3, 1, 64, &c->in_channels) ||
             int_key(root, path, "image_size", 224, 8, 8192, &c->image_size) ||
             num_key(root, path, "bn_eps", 1e-5, 0.0, 1.0, &c->bn_eps) ||
             num_key(root, path, "bn_momentum", 0.1, 0.0, 1.0 + 1e-12, &c->bn_momentum))
        rc = -1;
    cJSON_Delete(root);
    return rc;
}

int tn_resnet_config_load(const char *path, tn_resnet_config *c) {
    char *text = tn_read_file(path, NULL, 1 << 20);
    if (!text) return -1;
    int rc = tn_resnet_config_parse(text, path, c);
    free(text);
    return rc;
}

int tn_is_resnet_config(const char *path) {
    char *text = tn_read_file(path, NULL, 1 << 20);
    if (!text) return 0;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *t = root ? cJSON_GetObjectItemCaseSensitive(root, "model_type") : NULL;
    int yes = cJSON_IsString(t) && strcmp(t->valuestring, "resnet") == 0;
    cJSON_Delete(root);
    return yes;
}

int tn_resnet_config_save(const char *path, const tn_resnet_config *c) {
    char text[512];
    int n = snprintf(text, sizeof text,
                     "{\n  \"model_type\": \"resnet\",\n  \"block\": \"basic\",\n  \"layers\": [%d, %d, %d, %d],\n"
                     "  \"base_width\": %d,\n  \"num_classes\": %d,\n  \"in_channels\": %d,\n  \"image_size\": %d,\n"
                     "  \"bn_eps\": %.17g,\n  \"bn_momentum\": %.17g\n}\n",
                     c->layers[0], c->layers[1], c->layers[2], c->layers[3], c->base_width, c->num_classes,
                     c->in_channels, c->image_size, c->bn_eps, c->bn_momentum);
    if (n < 0 || (size_t)n >= sizeof text) return tn_err("%s: config too long", path);
    return tn_write_file_atomic(path, text, (size_t)n);
}
