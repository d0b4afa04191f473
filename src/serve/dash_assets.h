/* dash_assets -- the dashboard page's own files (src/serve/web/), compiled into the binary by CMake
 * (cmake/embed_web.cmake writes them as byte arrays into the build tree), so the page needs no install step. */
#ifndef TN_DASH_ASSETS_H
#define TN_DASH_ASSETS_H

#include <stddef.h>

typedef struct {
    const char *path;          /* "/index.html", "/app.js", "/app.css" */
    const char *type;          /* its Content-Type */
    const unsigned char *data;
    size_t size;
} tn_dash_asset;

extern const tn_dash_asset tn_dash_assets[]; /* ends with path NULL */

#endif
