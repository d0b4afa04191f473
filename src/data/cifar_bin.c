/* cifar_bin -- the CIFAR-10 binary version (contract: data/image_set.h): records of 1 label byte + 3 x 1024 pixel
 * bytes, 10000 per file in the real files (any whole number is accepted, so small files in the real format test
 * it), class names one per line in batches.meta.txt. */
#include "data/image_set.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define CIFAR_SIDE 32
#define CIFAR_PIXELS (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CLASSES 10

/* appends the records of one file to s */
static int load_batch(const char *path, tn_image_set *s) {
    size_t len = 0;
    char *data = tn_read_file(path, &len, (size_t)1 << 30);
    if (!data) return -1;
    if (len == 0 || len % CIFAR_RECORD)
        return free(data), tn_err("%s: %zu bytes is not a whole number of CIFAR-10 records (%d bytes each: label + "
                                  "3x32x32 pixels)", path, len, CIFAR_RECORD);
    int n = (int)(len / CIFAR_RECORD);
    s->px = tn_xrealloc(s->px, (size_t)(s->n + n) * CIFAR_PIXELS);
    s->labels = tn_xrealloc(s->labels, (size_t)(s->n + n) * sizeof *s->labels);
    for (int r = 0; r < n; r++) {
        const uint8_t *rec = (const uint8_t *)data + (size_t)r * CIFAR_RECORD;
        int label = rec[0];
        if (label >= CIFAR_CLASSES) {
            free(data);
            return tn_err("%s: record %d: label %d is not a CIFAR-10 class (0..9)", path, r, label);
        }
        s->labels[s->n + r] = label;
        memcpy(s->px + (size_t)(s->n + r) * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
    }
    s->n += n;
    free(data);
    return 0;
}

/* class names from batches.meta.txt; "0".."9" when the file is absent */
static int load_meta(const char *dir, tn_image_set *s) {
    s->num_classes = CIFAR_CLASSES;
    s->class_names = tn_xcalloc(CIFAR_CLASSES, sizeof *s->class_names);
    char *path = tn_path_join(dir, "batches.meta.txt");
    char *text = tn_file_exists(path) ? tn_read_file(path, NULL, 1 << 16) : NULL;
    int k = 0;
    for (char *line = text, *next; line && *line && k < CIFAR_CLASSES; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        else next = line + strlen(line);
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = '\0';
        if (n) s->class_names[k++] = tn_xstrdup(line);
    }
    int bad = text && k != CIFAR_CLASSES;
    if (bad) tn_err("%s: %d class names, CIFAR-10 has 10 (one per line)", path, k);
    for (; k < CIFAR_CLASSES; k++) {
        char b[12];
        snprintf(b, sizeof b, "%d", k);
        s->class_names[k] = tn_xstrdup(b);
    }
    free(text), free(path);
    return bad ? -1 : 0;
}

int tn_cifar10_load(const char *dir, int train, tn_image_set *s) {
    memset(s, 0, sizeof *s);
    s->C = 3, s->H = s->W = CIFAR_SIDE;
    int rc = load_meta(dir, s);
    for (int b = train ? 1 : 0; rc == 0 && b <= (train ? 5 : 0); b++) {
        char name[32];
        snprintf(name, sizeof name, train ? "data_batch_%d.bin" : "test_batch.bin", b);
        char *path = tn_path_join(dir, name);
        if (!tn_file_exists(path))
            rc = tn_err("%s: not found (a CIFAR-10 binary folder holds data_batch_1..5.bin and test_batch.bin, as "
                        "cifar-10-binary.tar.gz unpacks)", path);
        else
            rc = load_batch(path, s);
        free(path);
    }
    if (rc) tn_image_set_free(s);
    return rc;
}

void tn_image_set_free(tn_image_set *s) {
    for (int k = 0; s->class_names && k < s->num_classes; k++) free(s->class_names[k]);
    free(s->class_names), free(s->px), free(s->labels);
    memset(s, 0, sizeof *s);
}
