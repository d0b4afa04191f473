/* ifname.c -- see ifname.h. */
#include "launch/ifname.h"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/core.h"

/* Does one list item (up to `len` characters, ":port" already cut) select `name`? */
static int item_match(const char *item, size_t len, const char *name, int exact) {
    if (len == 0) return 0;
    return exact ? strlen(name) == len && strncmp(item, name, len) == 0 : strncmp(item, name, len) == 0;
}

int tn_ifname_match(const char *spec, const char *name) {
    int not = 0, exact = 0;
    if (*spec == '^') not = 1, spec++;
    if (*spec == '=') exact = 1, spec++;
    int hit = 0;
    for (const char *p = spec; *p && !hit;) {
        size_t len = strcspn(p, ","), name_len = strcspn(p, ":,");
        hit = item_match(p, name_len < len ? name_len : len, name, exact);
        p += len + (p[len] == ',');
    }
    return not ? !hit : hit;
}

static int is_loopback(const char *name) { return strncmp(name, "lo", 2) == 0 && (name[2] == '\0' || (name[2] >= '0' && name[2] <= '9')); }

int tn_ifname_select(const char *spec, const char *const *ifs, int n_ifs, char *out, size_t n) {
    out[0] = '\0';
    int count = 0;
    for (int pass = 0; pass < 2 && count == 0; pass++) /* a '^' list: loopback only where nothing else is left */
        for (int i = 0; i < n_ifs; i++) {
            if (pass == 0 && spec[0] == '^' && is_loopback(ifs[i])) continue;
            if (pass == 1 && spec[0] != '^') break;
            if (!tn_ifname_match(spec, ifs[i])) continue;
            size_t used = strlen(out);
            if (used + strlen(ifs[i]) + 2 > n) return tn_err("NCCL_SOCKET_IFNAME='%s': too many interfaces match", spec);
            snprintf(out + used, n - used, "%s%s", count ? "," : "", ifs[i]);
            count++;
        }
    if (count) return count;
    char have[512] = "";
    for (int i = 0; i < n_ifs; i++) {
        size_t used = strlen(have);
        snprintf(have + used, sizeof have - used, "%s%s", i ? ", " : "", ifs[i]);
    }
    return tn_err("NCCL_SOCKET_IFNAME='%s': no network interface of this machine matches (it has %s); name one of "
                  "them, or unset it", spec, n_ifs ? have : "none with an IPv4 address");
}

int tn_ifname_resolve(const char *spec, char *out, size_t n) {
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0) return tn_err("NCCL_SOCKET_IFNAME: cannot list this machine's network interfaces");
    const char *names[256];
    int k = 0;
    for (struct ifaddrs *i = list; i && k < 256; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        int dup = 0;
        for (int j = 0; j < k && !dup; j++) dup = strcmp(names[j], i->ifa_name) == 0;
        if (!dup) names[k++] = i->ifa_name;
    }
    int rc = tn_ifname_select(spec, names, k, out, n);
    freeifaddrs(list);
    return rc;
}
