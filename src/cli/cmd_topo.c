/* cmd_topo.c -- `tandem topo`: what connects this machine's GPUs (NVLink, PCIe switch, host bridge, NUMA node), as
 * `nvidia-smi topo -m` prints it, and where tandem puts its ranks: local rank r computes on CUDA device r mod the
 * visible devices (backend.h tn_backend_select) and, under `tandem launch -n N`, runs on cores [r c, r c + c) with
 * c = cores / N (cmd_launch.c); a rank whose cores sit on another NUMA node than its GPU is marked. Which GPUs share
 * a PCIe switch or NVLink decides how fast data parallelism exchanges gradients (NCCL's rings follow these links).
 *
 * NVML (libnvidia-ml.so.1, part of the NVIDIA driver) is opened at run time, so this works with any build and says
 * in one line when there is no driver or GPU; the CPU side comes from hwloc. */
#include <dlfcn.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/core.h"

/* ---- the few NVML declarations used (nvml.h's ABI; no header needed at build time) */
typedef struct nvml_device *nvml_dev;
typedef struct {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci;
enum { NVML_OK = 0, NVML_MAX_LINKS = 18 };
enum { TOPO_INTERNAL = 0, TOPO_SINGLE = 10, TOPO_MULTIPLE = 20, TOPO_HOSTBRIDGE = 30, TOPO_NODE = 40, TOPO_SYSTEM = 50 };

static struct {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    const char *(*error)(int);
    int (*count)(unsigned *);
    int (*by_index)(unsigned, nvml_dev *);
    int (*name)(nvml_dev, char *, unsigned);
    int (*pci)(nvml_dev, nvml_pci *);
    int (*ancestor)(nvml_dev, nvml_dev, int *);
    int (*link_state)(nvml_dev, unsigned, int *);
    int (*link_remote)(nvml_dev, unsigned, nvml_pci *);
    int (*driver)(char *, unsigned);
} nv;

static int load_nvml(char *why, size_t n) {
    nv.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nv.lib) {
        snprintf(why, n, "NVML (libnvidia-ml.so.1, installed with the NVIDIA driver) is not on this machine");
        return -1;
    }
#define SYM(field, name)                                                                                          \
    do {                                                                                                          \
        void *sym_ = dlsym(nv.lib, name);                                                                         \
        memcpy(&nv.field, &sym_, sizeof sym_);                                                                    \
    } while (0)
    SYM(init, "nvmlInit_v2");
    SYM(shutdown, "nvmlShutdown");
    SYM(error, "nvmlErrorString");
    SYM(count, "nvmlDeviceGetCount_v2");
    SYM(by_index, "nvmlDeviceGetHandleByIndex_v2");
    SYM(name, "nvmlDeviceGetName");
    SYM(pci, "nvmlDeviceGetPciInfo_v3");
    SYM(ancestor, "nvmlDeviceGetTopologyCommonAncestor");
    SYM(link_state, "nvmlDeviceGetNvLinkState");
    SYM(link_remote, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    SYM(driver, "nvmlSystemGetDriverVersion");
#undef SYM
    if (!nv.init || !nv.shutdown || !nv.count || !nv.by_index || !nv.name || !nv.pci || !nv.ancestor) {
        snprintf(why, n, "libnvidia-ml.so.1 lacks the functions tandem needs (driver too old)");
        return -1;
    }
    int rc = nv.init();
    if (rc != NVML_OK) {
        snprintf(why, n, "NVML did not start: %s", nv.error ? nv.error(rc) : "error");
        return -1;
    }
    return 0;
}

/* "00000000:19:00.0" and "0000:19:00.0" name the same device */
static int same_bus(const char *a, const char *b) {
    unsigned d1, b1, v1, f1, d2, b2, v2, f2;
    if (sscanf(a, "%x:%x:%x.%x", &d1, &b1, &v1, &f1) != 4 || sscanf(b, "%x:%x:%x.%x", &d2, &b2, &v2, &f2) != 4)
        return strcasecmp(a, b) == 0;
    return d1 == d2 && b1 == b2 && v1 == v2 && f1 == f2;
}

static const char *ancestor_name(int level) {
    switch (level) {
    case TOPO_INTERNAL: return "X";
    case TOPO_SINGLE: return "PIX";
    case TOPO_MULTIPLE: return "PXB";
    case TOPO_HOSTBRIDGE: return "PHB";
    case TOPO_NODE: return "NODE";
    default: return "SYS";
    }
}

typedef struct {
    nvml_dev h;
    char name[96], bus[32];
    int cuda;            /* CUDA ordinal in this process (-1: hidden by CUDA_VISIBLE_DEVICES) */
    char cpus[128];      /* CPUs of its NUMA node (hwloc) */
    int numa;            /* -1 unknown */
} gpu;

/* The GPU's place in the machine: the cpuset of its first non-I/O ancestor, and that set's NUMA node. */
static void locate(hwloc_topology_t topo, gpu *g) {
    g->numa = -1;
    snprintf(g->cpus, sizeof g->cpus, "?");
    if (!topo) return;
    unsigned d, b, v, f;
    if (sscanf(g->bus, "%x:%x:%x.%x", &d, &b, &v, &f) != 4) return;
    hwloc_obj_t pci = hwloc_get_pcidev_by_busid(topo, d, b, v, f);
    hwloc_obj_t anc = pci ? hwloc_get_non_io_ancestor_obj(topo, pci) : NULL;
    if (!anc || !anc->cpuset) return;
    hwloc_bitmap_list_snprintf(g->cpus, sizeof g->cpus, anc->cpuset);
    if (anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1) g->numa = hwloc_bitmap_first(anc->nodeset);
}

/* NUMA nodes (as a list) of the cores [c0, c0 + n) in hwloc's logical order, into buf; their CPUs into cpus. */
static void cores_place(hwloc_topology_t topo, int c0, int n, char *cpus, size_t cn, char *numa, size_t nn) {
    snprintf(cpus, cn, "?"), snprintf(numa, nn, "?");
    if (!topo) return;
    hwloc_bitmap_t set = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
    for (int k = c0; k < c0 + n; k++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)k);
        if (core && core->cpuset) hwloc_bitmap_or(set, set, core->cpuset);
    }
    if (!hwloc_bitmap_iszero(set)) {
        hwloc_cpuset_to_nodeset(topo, set, nodes);
        hwloc_bitmap_list_snprintf(cpus, cn, set);
        hwloc_bitmap_list_snprintf(numa, nn, nodes);
    }
    hwloc_bitmap_free(set), hwloc_bitmap_free(nodes);
}

int tn_cmd_topo(int argc, char **argv) {
    int ranks = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
            char *end;
            long r = strtol(argv[++i], &end, 10);
            if (*end || r < 1 || r > 4096) {
                fprintf(stderr, "tandem topo: error: --ranks expects an integer in [1, 4096], got '%s'\n", argv[i]);
                return 1;
            }
            ranks = (int)r;
        } else {
            fprintf(stderr, "tandem topo: error: unexpected argument '%s' (expected --ranks N)\n", argv[i]);
            return 1;
        }
    }
    char host[64] = "?", why[256];
    gethostname(host, sizeof host - 1);
    if (load_nvml(why, sizeof why) != 0) {
        printf("tandem topo: no GPU topology on %s: %s\n", host, why);
        return 0;
    }
    unsigned n = 0;
    if (nv.count(&n) != NVML_OK || n == 0) {
        printf("tandem topo: no GPU topology on %s: NVML sees no NVIDIA GPU\n", host);
        nv.shutdown();
        return 0;
    }
    hwloc_topology_t topo = NULL;
    if (hwloc_topology_init(&topo) != 0 ||
        hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0 ||
        hwloc_topology_load(topo) != 0) {
        if (topo) hwloc_topology_destroy(topo);
        topo = NULL; /* NUMA columns then read "?" */
    }
    gpu *g = tn_xcalloc(n, sizeof *g);
    int visible = tn_backend_gpu_count();
    for (unsigned i = 0; i < n; i++) {
        nvml_pci p;
        g[i].cuda = -1;
        if (nv.by_index(i, &g[i].h) != NVML_OK) continue;
        nv.name(g[i].h, g[i].name, sizeof g[i].name);
        if (nv.pci(g[i].h, &p) == NVML_OK) snprintf(g[i].bus, sizeof g[i].bus, "%s", p.bus_id);
        for (int c = 0; c < visible; c++) {
            char b[32];
            if (tn_backend_gpu_bus_id(c, b, sizeof b) == 0 && same_bus(b, g[i].bus)) g[i].cuda = c;
        }
        locate(topo, &g[i]);
    }
    char drv[80] = "?";
    if (nv.driver) nv.driver(drv, sizeof drv);
    printf("tandem topo: %s, %u NVIDIA GPU(s), driver %s\n\n       ", host, n, drv);
    for (unsigned j = 0; j < n; j++) printf("  GPU%-4u", j);
    printf("  %-24s %s\n", "CPU affinity", "NUMA affinity");
    for (unsigned i = 0; i < n; i++) {
        printf("GPU%-4u", i);
        for (unsigned j = 0; j < n; j++) {
            char cell[16] = "X";
            if (i != j) {
                int links = 0;
                for (unsigned l = 0; nv.link_state && nv.link_remote && l < NVML_MAX_LINKS; l++) {
                    int on = 0;
                    nvml_pci rp;
                    if (nv.link_state(g[i].h, l, &on) == NVML_OK && on && nv.link_remote(g[i].h, l, &rp) == NVML_OK &&
                        same_bus(rp.bus_id, g[j].bus))
                        links++;
                }
                int level = TOPO_SYSTEM;
                if (links) snprintf(cell, sizeof cell, "NV%d", links);
                else if (nv.ancestor(g[i].h, g[j].h, &level) == NVML_OK) snprintf(cell, sizeof cell, "%s", ancestor_name(level));
                else snprintf(cell, sizeof cell, "?");
            }
            printf("  %-7s", cell);
        }
        char numa[16] = "?";
        if (g[i].numa >= 0) snprintf(numa, sizeof numa, "%d", g[i].numa);
        printf("  %-24s %s\n", g[i].cpus, numa);
    }
    printf("\nLegend: X = self; SYS = through the interconnect between NUMA nodes (QPI/UPI); NODE = through the host\n"
           "bridges inside one NUMA node; PHB = through a PCIe host bridge (the CPU); PXB = through several PCIe bridges,\n"
           "no host bridge; PIX = through at most one PCIe bridge (one switch); NV# = # NVLinks\n\n");

    /* tandem's placement */
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (visible == 0) {
        printf("placement: no CUDA device is visible to tandem%s (CUDA_VISIBLE_DEVICES='%s'): ranks compute on the "
               "CPU\n", tn_backend_have_cuda() ? "" : " (this build has no CUDA backend)", cvd ? cvd : "");
    } else {
        if (!ranks) ranks = visible;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int per = cpus > 0 ? (int)(cpus / ranks) : 0;
        printf("placement of %d local rank(s) (tandem launch -n %d): CUDA device = local rank mod %d%s%s%s; cores = "
               "%d per rank in order\n", ranks, ranks, visible, cvd ? " (CUDA_VISIBLE_DEVICES=" : "", cvd ? cvd : "",
               cvd ? ")" : "", per);
        if (ranks > visible)
            printf("  note: %d ranks share %d GPU(s): NCCL refuses two ranks on one GPU, so gradients go through MPI, "
                   "staged in host memory\n", ranks, visible);
        for (int r = 0; r < ranks; r++) {
            int c = r % visible, k = -1;
            for (unsigned i = 0; i < n; i++)
                if (g[i].cuda == c) k = (int)i;
            char rc[128], rn[64];
            cores_place(topo, r * per, per, rc, sizeof rc, rn, sizeof rn);
            char gn[16] = "?";
            if (k >= 0 && g[k].numa >= 0) snprintf(gn, sizeof gn, "%d", g[k].numa);
            int mismatch = k >= 0 && g[k].numa >= 0 && strcmp(rn, gn) != 0 && strcmp(rn, "?") != 0;
            printf("  local rank %-3d -> cuda:%d = GPU%d (%s, %s, NUMA %s); cores %s (NUMA %s)%s\n", r, c, k,
                   k >= 0 ? g[k].name : "?", k >= 0 ? g[k].bus : "?", gn, per ? rc : "-", per ? rn : "-",
                   mismatch ? "  <- cores on another NUMA node than the GPU" : "");
        }
    }
    free(g);
    if (topo) hwloc_topology_destroy(topo);
    nv.shutdown();
    return 0;
}
