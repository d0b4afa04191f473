/* hostfile.c -- see hostfile.h. */
#include "launch/hostfile.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define MAX_HOSTS 65536

static int valid_host(const char *s) {
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '.' || *s == '-' || *s == '_' || *s == ':')) return 0;
    return 1;
}

static int parse_slots(const char *v, int *out) {
    char *end;
    long n = strtol(v, &end, 10);
    if (*v == '\0' || *end || n < 1 || n > 4096) return -1;
    *out = (int)n;
    return 0;
}

int tn_hostfile_parse(const char *text, const char *path, tn_hostfile *hf) {
    memset(hf, 0, sizeof *hf);
    snprintf(hf->path, sizeof hf->path, "%s", path);
    int cap = 0, line = 0;
    for (const char *p = text; *p;) {
        line++;
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char buf[1024];
        if (len >= sizeof buf) {
            tn_hostfile_free(hf);
            return tn_err("%s:%d: line longer than %zu characters", path, line, sizeof buf - 1);
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        p = eol ? eol + 1 : p + len;
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        char *save = NULL, *tok = strtok_r(buf, " \t\r", &save);
        if (!tok) continue;
        if (!valid_host(tok) || strlen(tok) >= sizeof hf->hosts[0].name) {
            tn_hostfile_free(hf);
            return tn_err("%s:%d: '%s' is not a host name (expected: HOST slots=N)", path, line, tok);
        }
        tn_host h = {.slots = 1, .line = line};
        snprintf(h.name, sizeof h.name, "%s", tok);
        while ((tok = strtok_r(NULL, " \t\r", &save))) {
            int dummy;
            if (strncmp(tok, "slots=", 6) == 0 && parse_slots(tok + 6, &h.slots) == 0) continue;
            if (strncmp(tok, "max_slots=", 10) == 0 && parse_slots(tok + 10, &dummy) == 0) continue;
            tn_hostfile_free(hf);
            return tn_err("%s:%d: '%s' after host %s: expected slots=N with N in 1..4096", path, line, tok, h.name);
        }
        for (int i = 0; i < hf->n; i++)
            if (strcmp(hf->hosts[i].name, h.name) == 0) {
                int first = hf->hosts[i].line;
                tn_hostfile_free(hf);
                return tn_err("%s:%d: host %s is listed twice (first on line %d); give it one line with slots=N",
                              path, line, h.name, first);
            }
        if (hf->n == MAX_HOSTS) {
            tn_hostfile_free(hf);
            return tn_err("%s:%d: more than %d hosts", path, line, MAX_HOSTS);
        }
        if (hf->n == cap) {
            cap = cap ? 2 * cap : 8;
            hf->hosts = tn_xrealloc(hf->hosts, (size_t)cap * sizeof *hf->hosts);
        }
        hf->hosts[hf->n++] = h;
        hf->total_slots += h.slots;
    }
    if (hf->n == 0) return tn_err("%s: no hosts (expected lines of the form: HOST slots=N)", path);
    return 0;
}

int tn_hostfile_load(const char *path, tn_hostfile *hf) {
    size_t n = 0;
    char *text = tn_read_file(path, &n, 1 << 20);
    if (!text) return -1;
    if (memchr(text, '\0', n)) {
        free(text);
        return tn_err("%s: binary data in a hostfile (expected text lines HOST slots=N)", path);
    }
    int rc = tn_hostfile_parse(text, path, hf);
    free(text);
    return rc;
}

void tn_hostfile_free(tn_hostfile *hf) {
    free(hf->hosts);
    hf->hosts = NULL;
    hf->n = 0;
}
