/* image_folder -- torchvision's ImageFolder layout (contract: data/image_set.h): each sub-folder of dir is a class
 * (sorted by name, index = position), its image files (torchvision's IMG_EXTENSIONS, case-insensitive) sorted by
 * name are the samples; each is decoded as PIL does (data/image.h), converted to RGB and resized to size x size. */
#include "data/image_set.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/core.h"
#include "data/image.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* sorted names in dir that are folders (want_dirs) or regular files; NULL with tn_err when dir cannot be read */
static char **list_dir(const char *dir, int want_dirs, int *n) {
    DIR *d = opendir(dir);
    if (!d) return tn_err("%s: cannot open the folder", dir), NULL;
    char **names = NULL;
    *n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char *p = tn_path_join(dir, e->d_name);
        struct stat st;
        int ok = stat(p, &st) == 0 && (want_dirs ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
        free(p);
        if (!ok) continue;
        names = tn_xrealloc(names, (size_t)(*n + 1) * sizeof *names);
        names[(*n)++] = tn_xstrdup(e->d_name);
    }
    closedir(d);
    if (*n) qsort(names, (size_t)*n, sizeof *names, cmp_str);
    return names ? names : tn_xcalloc(1, sizeof *names);
}

static void free_list(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static int is_image_name(const char *name) {
    static const char *const ext[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof ext / sizeof *ext; i++)
        if (strcasecmp(dot, ext[i]) == 0) return 1;
    return 0;
}

/* decodes path into sample s->n of s (RGB, size x size) */
static int add_image(tn_image_set *s, const char *path, int size, int label) {
    tn_image im, rs;
    if (tn_image_load(path, &im)) return -1;
    tn_image_to_rgb(&im);
    if (im.w != size || im.h != size) {
        int rc = tn_image_resize(&im, size, size, &rs);
        tn_image_free(&im);
        if (rc) return tn_err("%s: cannot resize to %dx%d: %s", path, size, size, tn_errmsg());
        im = rs;
    }
    size_t plane = (size_t)size * size;
    s->px = tn_xrealloc(s->px, (size_t)(s->n + 1) * 3 * plane);
    s->labels = tn_xrealloc(s->labels, (size_t)(s->n + 1) * sizeof *s->labels);
    uint8_t *dst = s->px + (size_t)s->n * 3 * plane;
    for (size_t i = 0; i < plane; i++) /* HWC -> CHW */
        for (int c = 0; c < 3; c++) dst[c * plane + i] = im.px[i * 3 + c];
    s->labels[s->n++] = label;
    tn_image_free(&im);
    return 0;
}

static int load_class(tn_image_set *s, const char *dir, const char *cls, int size, int label) {
    char *cdir = tn_path_join(dir, cls);
    int n, rc = 0;
    char **files = list_dir(cdir, 0, &n);
    if (!files) rc = -1;
    for (int i = 0; rc == 0 && i < n; i++) {
        if (!is_image_name(files[i])) continue;
        char *p = tn_path_join(cdir, files[i]);
        rc = add_image(s, p, size, label);
        free(p);
    }
    if (files) free_list(files, n);
    free(cdir);
    return rc;
}

int tn_image_folder_load(const char *dir, int size, tn_image_set *s) {
    memset(s, 0, sizeof *s);
    s->C = 3, s->H = s->W = size;
    int nc;
    char **classes = list_dir(dir, 1, &nc);
    if (!classes) return -1;
    if (nc == 0) return free(classes), tn_err("%s: no class folders (ImageFolder wants dir/<class>/<image>)", dir);
    s->num_classes = nc, s->class_names = classes;
    int rc = 0;
    for (int k = 0; rc == 0 && k < nc; k++) rc = load_class(s, dir, classes[k], size, k);
    if (rc == 0 && s->n == 0) rc = tn_err("%s: no images (extensions .jpg .jpeg .png .webp ...) in its class folders", dir);
    if (rc) tn_image_set_free(s);
    return rc;
}
