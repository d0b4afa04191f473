/* oom.c -- see oom.h. */
#include "core/oom.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/core.h"

static _Thread_local const char *g_loading;
static _Thread_local int g_json_oom;

const char *tn_loading(const char *what) {
    const char *prev = g_loading;
    g_loading = what;
    return prev;
}

void tn_die_oom(size_t bytes) {
    if (g_loading) tn_die("out of memory allocating %zu bytes while loading %s", bytes, g_loading);
    tn_die("out of memory allocating %zu bytes", bytes);
}

static void *json_malloc(size_t n) {
    void *p = malloc(n);
    if (!p) g_json_oom = 1;
    return p;
}

static pthread_once_t g_hooks_once = PTHREAD_ONCE_INIT;
static void install_hooks(void) {
    cJSON_Hooks h = {json_malloc, free};
    cJSON_InitHooks(&h);
}

void tn_json_oom_reset(void) {
    pthread_once(&g_hooks_once, install_hooks);
    g_json_oom = 0;
}

int tn_json_oom(void) { return g_json_oom; }
