/* test_unit_ifname -- NCCL_SOCKET_IFNAME read with NCCL's rules (src/launch/ifname.h): prefixes, '=' exact
 * names, '^' exclusion (and "^="), ":port" ignored, loopback left out of an exclusion unless nothing else is
 * left, and one error line naming the spec and the interfaces when none matches. Expected lists are written
 * out by hand from the rules, over a made-up machine's interfaces. */
#include <string.h>

#include "core/core.h"
#include "launch/ifname.h"
#include "testlib.h"

static const char *const IFS[] = {"lo", "eth0", "eth1", "ens1f0", "ens1f1", "docker0", "ib0"};
#define N_IFS (int)(sizeof IFS / sizeof *IFS)

static int selects(const char *spec, const char *want) {
    char out[256];
    int n = tn_ifname_select(spec, IFS, N_IFS, out, sizeof out);
    if (n < 0 || strcmp(out, want) != 0) {
        printf("  '%s' selected '%s' (%d), expected '%s'\n", spec, n < 0 ? tn_errmsg() : out, n, want);
        return 0;
    }
    return 1;
}

int main(void) {
    CHECK(selects("ens1f0", "ens1f0"));
    CHECK(selects("eth", "eth0,eth1"));                   /* a prefix */
    CHECK(selects("ens1", "ens1f0,ens1f1"));
    CHECK(selects("=eth1,ib0", "eth1,ib0"));
    CHECK(selects("eth0:29500,ib", "eth0,ib0"));          /* a port is not part of the name */
    CHECK(selects("^docker,eth", "ens1f0,ens1f1,ib0"));   /* exclusion: loopback left out too */
    CHECK(selects("^=eth0", "eth1,ens1f0,ens1f1,docker0,ib0"));
    CHECK(selects("lo", "lo"));                           /* named: loopback is what the user wants */
    CHECK(tn_ifname_match("^docker", "docker0") == 0 && tn_ifname_match("^docker", "lo") == 1);
    /* an exclusion that leaves only loopback: loopback (a one-machine job) */
    static const char *const ONE[] = {"lo", "docker0"};
    char out[64];
    CHECK(tn_ifname_select("^docker", ONE, 2, out, sizeof out) == 1 && strcmp(out, "lo") == 0);
    /* nothing matches: one line naming the variable, its value and what this machine has */
    CHECK(tn_ifname_select("ens2", IFS, N_IFS, out, sizeof out) == -1);
    CHECK(strstr(tn_errmsg(), "NCCL_SOCKET_IFNAME='ens2': no network interface of this machine matches (it has lo, "
                              "eth0, eth1, ens1f0, ens1f1, docker0, ib0)") != NULL);
    CHECK(tn_ifname_select("=eth", IFS, N_IFS, out, sizeof out) == -1); /* exact: none is called "eth" */
    CHECK(tn_ifname_select("", IFS, N_IFS, out, sizeof out) == -1);
    /* the real machine: loopback always exists */
    char here[256];
    CHECK(tn_ifname_resolve("=lo", here, sizeof here) == 1 && strcmp(here, "lo") == 0);
    return tl_done("test_unit_ifname");
}
