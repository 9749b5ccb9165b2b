/*
 * A scriptable stand-in for libnvidia-ml.so.1, compiled against the official nvml.h so that
 * every struct layout, enum value and return code is the real one. pynvml loads it through its
 * ordinary ctypes path (dlopen "libnvidia-ml.so.1").
 *
 * State comes from the file named by $FAKE_NVML_STATE, re-read whenever it changes (inode, size
 * or mtime), so a test moves counters and injects faults by rewriting that file (tests write it
 * with tests/fakes/nvml/state.py; the format is documented there). Without the variable, or
 * before its file exists, the fake plays a machine without a driver (nvmlInit fails with
 * NVML_ERROR_LIBRARY_NOT_FOUND), so having it loaded changes nothing for tests that script no GPUs.
 *
 * Besides the NVML entry points, a few fake_nvml_* functions let tests read how often each
 * symbol was called, per GPU, and which field ids were requested.
 *
 * A cost model for real drivers: "latency_us 300" in the state charges every call 300 us, and
 * "latency_us nvmlDeviceGetPowerUsage 900" one symbol its own (nvmlEventSetWait_v2 only so: its
 * time is a wait). The charge is taken without the library lock, as a driver's other GPUs answer
 * meanwhile: slept (nanosleep), or with "latency_spin 1" spun on the CPU, as an ioctl the kernel
 * driver serves on the caller's core would be.
 *
 * Built with -DFAKE_NVML_LEGACY it leaves out the newer versioned symbols (as an old driver
 * would), so the agent's choice of call variants can be tested.
 */
#define _GNU_SOURCE
#include <nvml.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_GPUS 16
#define MAX_LINKS NVML_NVLINK_MAX_LINKS
#define MAX_PROCS 64
#define MAX_UNSUPPORTED_FNS 32
#define MAX_EVENTS 256
#define MAX_SYMBOLS 128
#define MAX_MIG 7
#define FIELD_IDS 512
#define MAGIC_SAMPLE 0x67706d73u
#define MAGIC_SET 0x65767374u

typedef struct {
    unsigned int state, speed_mbps;
    unsigned long long tx_kib, rx_kib, replay, recovery, crc_flit, crc_data;
    /* Added to replay / recovery on every read: errors that grow while someone watches. */
    unsigned long long replay_step, recovery_step;
} fake_link;

struct nvmlDevice_st {
    int index;
    char name[96], uuid[96], serial[32], bus_id[32];
    unsigned int arch, pci_device_id, lost;
    unsigned int util_gpu, util_mem, power_mw, sm_clock;
    int temp;
    unsigned long long mem_total, mem_used, mem_reserved;
    unsigned int pcie_gen_max, pcie_width_max, pcie_gen, pcie_width, pcie_rx_kbs, pcie_tx_kbs, pcie_gen_gpu_max;
    unsigned long long pcie_rx_bytes, pcie_tx_bytes, pcie_replay;
    unsigned long long clock_reasons, ecc_dbe_vol, ecc_dbe_agg, supported_events;
    unsigned int remap_pending, remap_failure, remap_cor, remap_unc, gpm, link_count;
    unsigned long long retired_sbe, retired_dbe;
    unsigned int retired_pending;
    double gpm_sm_active, gpm_sm_occupancy, gpm_tensor, gpm_gr_active, gpm_dram;
    double temp_fraction; /* the sensor's sub-degree part: field 308 has it, the integer calls drop it */
    unsigned int mem_clock, util_enc, util_dec, mem_temp;
    unsigned long long energy_mj;
    fake_link links[MAX_LINKS];
    unsigned int nprocs;
    struct { unsigned int pid; unsigned long long mem; } procs[MAX_PROCS];
    int n_unsupported;
    char unsupported[MAX_UNSUPPORTED_FNS][64];
    unsigned char unsupported_field[FIELD_IDS / 8];
    /* NVLink fabric (nvmlDeviceGetGpuFabricInfoV): state 0 is a GPU that is not fabric-attached. */
    unsigned int fabric_state, fabric_status, fabric_clique, fabric_health, fabric_summary;
    char fabric_cluster[64];
    unsigned int c2c_links, c2c_mbps;
    /* Per-process utilization samples (nvmlDeviceGetProcessUtilization), percent. */
    unsigned int nputil;
    struct { unsigned int pid, sm, mem; } putil[MAX_PROCS];
    /* MIG: a capable GPU's mode and instances; a MIG device handle is an entry of mig_devs. */
    unsigned int mig_capable, mig_mode, mig_count;
    int parent; /* -1 for a GPU, its GPU's index for a MIG device */
    unsigned int gi, ci, slices, sms;
    char profile[32];
    /* A failing GPU: every call on it takes delay_ms more, or blocks while hang is set (the state
       file is re-read meanwhile), or fails with GPU_IS_LOST once it has had lost_after calls. */
    unsigned int delay_ms, hang;
    unsigned long long lost_after;
    /* How the board's power sensor answers (see power_reading_mw): "" or "ideal", "sampled",
       "mean1s", "energy"; the lag by which readings trail the draw; a window's length, the period
       between windows and the first window's offset (ms; 0: the mode's own). */
    char power_mode[16];
    unsigned int power_lag_ms, power_window_ms, power_period_ms, power_offset_ms;
};

struct nvmlEventSet_st {
    unsigned int magic;
    unsigned long long masks[MAX_GPUS];
    long long last_seq;
};

struct nvmlGpmSample_st {
    unsigned int magic;
    int gpu, taken, gi; /* gi: the MIG GPU instance sampled, -1 for the whole GPU */
    double t, sm_active, sm_occupancy, tensor, gr_active, dram;
    unsigned long long pcie_rx, pcie_tx, nvl_rx_kib, nvl_tx_kib;
};

typedef struct { long long seq; int gpu; unsigned long long type, data; unsigned int gi, ci; } fake_event;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvmlDevice_st gpus[MAX_GPUS];
static struct nvmlDevice_st mig_devs[MAX_GPUS][MAX_MIG];
static unsigned int gpu_count, init_refcount;
static int init_error, cuda_version, has_clock;
static double fake_clock;
static char driver_version[80], nvml_version[80];
static fake_event events[MAX_EVENTS];
static int n_events;
static char loaded_path[4096];
static struct stat loaded_stat;
static int live_samples, live_sets;

/* The cost model (state lines latency_us, latency_spin): microseconds charged per call. */
#define MAX_LATENCY_OVERRIDES 32
static unsigned int latency_default_us;
static struct { char symbol[64]; unsigned int us; } latency_overrides[MAX_LATENCY_OVERRIDES];
static int n_latency_overrides, latency_spin;

/* ---- call accounting (survives state reloads) ---- */

typedef struct { const char *name; unsigned long long total, per_gpu[MAX_GPUS]; } symbol_count;
static symbol_count symbols[MAX_SYMBOLS];
static int n_symbols;
static unsigned long long field_requests[MAX_GPUS][FIELD_IDS];
static unsigned long long gpu_calls[MAX_GPUS]; /* every call on each GPU, for lost_after */

static void count_call(const char *name, int gpu) {
    int i;
    for (i = 0; i < n_symbols; i++)
        if (strcmp(symbols[i].name, name) == 0) break;
    if (i == n_symbols) {
        if (n_symbols == MAX_SYMBOLS) return;
        symbols[n_symbols++].name = name;
    }
    symbols[i].total++;
    if (gpu >= 0 && gpu < MAX_GPUS) symbols[i].per_gpu[gpu]++;
    if (gpu >= 0 && gpu < MAX_GPUS) gpu_calls[gpu]++;
}

unsigned long long fake_nvml_calls(const char *name, int gpu) {
    unsigned long long n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_symbols; i++) {
        if (name && strcmp(symbols[i].name, name) != 0) continue;
        n += gpu < 0 ? symbols[i].total : (gpu < MAX_GPUS ? symbols[i].per_gpu[gpu] : 0);
    }
    pthread_mutex_unlock(&lock);
    return n;
}

unsigned long long fake_nvml_field_requests(int gpu, unsigned int field_id) {
    if (gpu < 0 || gpu >= MAX_GPUS || field_id >= FIELD_IDS) return 0;
    pthread_mutex_lock(&lock);
    unsigned long long n = field_requests[gpu][field_id];
    pthread_mutex_unlock(&lock);
    return n;
}

/* Newline-separated names of every symbol called since the last reset; returns the length. */
int fake_nvml_called_symbols(char *buf, unsigned int len) {
    unsigned int used = 0;
    pthread_mutex_lock(&lock);
    if (len) buf[0] = 0;
    for (int i = 0; i < n_symbols; i++) {
        if (!symbols[i].total) continue;
        int n = snprintf(buf + used, len > used ? len - used : 0, "%s\n", symbols[i].name);
        if (n > 0) used += (unsigned int)n;
    }
    pthread_mutex_unlock(&lock);
    return (int)used;
}

void fake_nvml_reset_counts(void) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_symbols; i++) {
        symbols[i].total = 0;
        memset(symbols[i].per_gpu, 0, sizeof symbols[i].per_gpu);
    }
    memset(field_requests, 0, sizeof field_requests);
    memset(gpu_calls, 0, sizeof gpu_calls);
    pthread_mutex_unlock(&lock);
}

int fake_nvml_live_gpm_samples(void) { return live_samples; }
int fake_nvml_live_event_sets(void) { return live_sets; }
int fake_nvml_init_refcount(void) { return (int)init_refcount; }

/* ---- state file ---- */

static void reset_state(int scripted) {
    memset(gpus, 0, sizeof gpus);
    memset(mig_devs, 0, sizeof mig_devs);
    for (int i = 0; i < MAX_GPUS; i++) {
        gpus[i].index = i;
        gpus[i].parent = -1;
        for (int j = 0; j < MAX_MIG; j++) {
            mig_devs[i][j].index = i;
            mig_devs[i][j].parent = i;
        }
        gpus[i].supported_events = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
                                   nvmlEventTypeSingleBitEccError;
    }
    gpu_count = 0;
    init_error = scripted ? 0 : NVML_ERROR_LIBRARY_NOT_FOUND;
    cuda_version = 0;
    has_clock = 0;
    n_events = 0;
    strcpy(driver_version, "0.0.fake");
    strcpy(nvml_version, "13.0.fake");
    latency_default_us = 0;
    n_latency_overrides = 0;
    latency_spin = 0;
}

#define U32(f) {#f, offsetof(struct nvmlDevice_st, f), 4}
#define U64(f) {#f, offsetof(struct nvmlDevice_st, f), 8}
#define DBL(f) {#f, offsetof(struct nvmlDevice_st, f), 'd'}
#define STR(f) {#f, offsetof(struct nvmlDevice_st, f), sizeof(((struct nvmlDevice_st *)0)->f) | 0x1000}
static const struct { const char *key; size_t offset; unsigned int kind; } gpu_keys[] = {
    STR(name), STR(uuid), STR(serial), STR(bus_id),
    U32(arch), U32(pci_device_id), U32(lost), U32(util_gpu), U32(util_mem), U32(power_mw),
    U32(sm_clock), U32(temp), U64(mem_total), U64(mem_used), U64(mem_reserved),
    U32(pcie_gen_max), U32(pcie_width_max), U32(pcie_gen), U32(pcie_width),
    U32(pcie_rx_kbs), U32(pcie_tx_kbs), U64(pcie_rx_bytes), U64(pcie_tx_bytes), U64(pcie_replay),
    U64(clock_reasons), U64(ecc_dbe_vol), U64(ecc_dbe_agg), U64(supported_events),
    U32(remap_pending), U32(remap_failure), U32(remap_cor), U32(remap_unc), U32(gpm), U32(link_count),
    U32(pcie_gen_gpu_max), U64(retired_sbe), U64(retired_dbe), U32(retired_pending),
    DBL(gpm_sm_active), DBL(gpm_sm_occupancy), DBL(gpm_tensor), DBL(gpm_gr_active), DBL(gpm_dram), DBL(temp_fraction),
    U32(mem_clock), U32(util_enc), U32(util_dec), U32(mem_temp), U64(energy_mj),
    U32(fabric_state), U32(fabric_status), U32(fabric_clique), U32(fabric_health), U32(fabric_summary),
    STR(fabric_cluster), U32(c2c_links), U32(c2c_mbps), U32(mig_capable), U32(mig_mode), U32(mig_count),
    U32(gi), U32(ci), U32(slices), U32(sms), STR(profile), U32(delay_ms), U32(hang), U64(lost_after),
    STR(power_mode), U32(power_lag_ms), U32(power_window_ms), U32(power_period_ms), U32(power_offset_ms),
};

#define LINK_U32(f) {#f, offsetof(fake_link, f), 4}
#define LINK_U64(f) {#f, offsetof(fake_link, f), 8}
static const struct { const char *key; size_t offset; unsigned int kind; } link_keys[] = {
    LINK_U32(state), LINK_U32(speed_mbps), LINK_U64(tx_kib), LINK_U64(rx_kib), LINK_U64(replay),
    LINK_U64(recovery), LINK_U64(crc_flit), LINK_U64(crc_data), LINK_U64(replay_step), LINK_U64(recovery_step),
};

static void store(void *base, size_t offset, unsigned int kind, const char *value) {
    char *p = (char *)base + offset;
    if (kind & 0x1000) {
        size_t size = kind & 0xfff;
        snprintf(p, size, "%s", value);
    } else if (kind == 'd') {
        *(double *)p = strtod(value, NULL);
    } else if (kind == 4) {
        *(unsigned int *)p = (unsigned int)strtoll(value, NULL, 0);
    } else {
        *(unsigned long long *)p = strtoull(value, NULL, 0);
    }
}

/* Next whitespace-separated token of *s, or NULL. */
static char *token(char **s) {
    char *p = *s + strspn(*s, " \t");
    if (!*p) return NULL;
    char *end = p + strcspn(p, " \t");
    if (*end) *end++ = 0;
    *s = end;
    return p;
}

static void parse_gpu_line(struct nvmlDevice_st *g, char *rest) {
    char *key = token(&rest);
    if (!key) return;
    if (strcmp(key, "mig") == 0 && g->parent < 0) {
        /* "gpu 0 mig 2 KEY VALUE": the GPU's third MIG device, keyed like a GPU. */
        char *n = token(&rest);
        unsigned int m = n ? (unsigned int)strtoul(n, NULL, 10) : MAX_MIG;
        if (m < MAX_MIG) parse_gpu_line(&mig_devs[g->index][m], rest);
        return;
    }
    if (strcmp(key, "proc_util") == 0) {
        char *pid = token(&rest), *sm = token(&rest), *mem = token(&rest);
        if (pid && sm && mem && g->nputil < MAX_PROCS) {
            g->putil[g->nputil].pid = (unsigned int)strtoul(pid, NULL, 10);
            g->putil[g->nputil].sm = (unsigned int)strtoul(sm, NULL, 10);
            g->putil[g->nputil++].mem = (unsigned int)strtoul(mem, NULL, 10);
        }
        return;
    }
    if (strcmp(key, "unsupported") == 0) {
        char *fn = token(&rest);
        if (fn && g->n_unsupported < MAX_UNSUPPORTED_FNS)
            snprintf(g->unsupported[g->n_unsupported++], 64, "%s", fn);
        return;
    }
    if (strcmp(key, "unsupported_field") == 0) {
        char *id = token(&rest);
        unsigned int f = id ? (unsigned int)strtoul(id, NULL, 0) : FIELD_IDS;
        if (f < FIELD_IDS) g->unsupported_field[f / 8] |= (unsigned char)(1u << (f % 8));
        return;
    }
    if (strcmp(key, "proc") == 0) {
        char *pid = token(&rest), *mem = token(&rest);
        if (pid && mem && g->nprocs < MAX_PROCS) {
            g->procs[g->nprocs].pid = (unsigned int)strtoul(pid, NULL, 10);
            g->procs[g->nprocs++].mem = strtoull(mem, NULL, 10);
        }
        return;
    }
    if (strcmp(key, "nvlink") == 0) {
        char *link = token(&rest), *lkey = token(&rest), *value = token(&rest);
        unsigned int l = link ? (unsigned int)strtoul(link, NULL, 10) : MAX_LINKS;
        if (!lkey || !value || l >= MAX_LINKS) return;
        for (size_t i = 0; i < sizeof link_keys / sizeof link_keys[0]; i++)
            if (strcmp(link_keys[i].key, lkey) == 0) store(&g->links[l], link_keys[i].offset, link_keys[i].kind, value);
        return;
    }
    for (size_t i = 0; i < sizeof gpu_keys / sizeof gpu_keys[0]; i++) {
        if (strcmp(gpu_keys[i].key, key) != 0) continue;
        /* Strings take the rest of the line: GPU names have spaces. */
        char *value = rest + strspn(rest, " \t");
        if (!(gpu_keys[i].kind & 0x1000)) value = token(&rest);
        if (value) store(g, gpu_keys[i].offset, gpu_keys[i].kind, value);
        return;
    }
}

static void parse_line(char *line) {
    line[strcspn(line, "\r\n")] = 0;
    char *rest = line, *cmd = token(&rest);
    if (!cmd || cmd[0] == '#') return;
    if (strcmp(cmd, "gpus") == 0) {
        char *n = token(&rest);
        gpu_count = n ? (unsigned int)strtoul(n, NULL, 10) : 0;
        if (gpu_count > MAX_GPUS) gpu_count = MAX_GPUS;
    } else if (strcmp(cmd, "driver") == 0) {
        char *v = token(&rest);
        if (v) snprintf(driver_version, sizeof driver_version, "%s", v);
    } else if (strcmp(cmd, "nvml_version") == 0) {
        char *v = token(&rest);
        if (v) snprintf(nvml_version, sizeof nvml_version, "%s", v);
    } else if (strcmp(cmd, "cuda") == 0) {
        char *v = token(&rest);
        cuda_version = v ? atoi(v) : 0;
    } else if (strcmp(cmd, "init_error") == 0) {
        char *v = token(&rest);
        init_error = v ? atoi(v) : 0;
    } else if (strcmp(cmd, "clock") == 0) {
        char *v = token(&rest);
        has_clock = v != NULL;
        fake_clock = v ? strtod(v, NULL) : 0;
    } else if (strcmp(cmd, "latency_us") == 0) {
        char *a = token(&rest), *b = token(&rest);
        if (a && !b) {
            latency_default_us = (unsigned int)strtoul(a, NULL, 10);
        } else if (a && b && n_latency_overrides < MAX_LATENCY_OVERRIDES) {
            snprintf(latency_overrides[n_latency_overrides].symbol, sizeof latency_overrides[0].symbol, "%s", a);
            latency_overrides[n_latency_overrides++].us = (unsigned int)strtoul(b, NULL, 10);
        }
    } else if (strcmp(cmd, "latency_spin") == 0) {
        char *v = token(&rest);
        latency_spin = v ? atoi(v) : 0;
    } else if (strcmp(cmd, "event") == 0) {
        char *seq = token(&rest), *gpu = token(&rest), *kind = token(&rest), *data = token(&rest);
        char *gi = token(&rest), *ci = token(&rest); /* optional: the MIG instance it hit */
        if (!seq || !gpu || !kind || !data || n_events == MAX_EVENTS) return;
        fake_event *e = &events[n_events++];
        e->gi = gi ? (unsigned int)strtoul(gi, NULL, 0) : 0xFFFFFFFFu;
        e->ci = ci ? (unsigned int)strtoul(ci, NULL, 0) : 0xFFFFFFFFu;
        e->seq = strtoll(seq, NULL, 10);
        e->gpu = atoi(gpu);
        e->type = strcmp(kind, "xid") == 0 ? nvmlEventTypeXidCriticalError
                  : strcmp(kind, "dbe") == 0 ? nvmlEventTypeDoubleBitEccError
                                               : nvmlEventTypeSingleBitEccError;
        e->data = strtoull(data, NULL, 0);
    } else if (strcmp(cmd, "gpu") == 0) {
        char *index = token(&rest);
        if (!index) return;
        if (strcmp(index, "*") == 0) {
            for (int i = 0; i < MAX_GPUS; i++) {
                char copy[1024];
                snprintf(copy, sizeof copy, "%s", rest);
                parse_gpu_line(&gpus[i], copy);
            }
        } else {
            int i = atoi(index);
            if (i >= 0 && i < MAX_GPUS) parse_gpu_line(&gpus[i], rest);
        }
    }
}

static void accrue_reasons(int i, unsigned long long mask);

/* Called with the lock held at the top of every entry point. */
static void maybe_reload(void) {
    static int ready;
    const char *path = getenv("FAKE_NVML_STATE");
    struct stat st;
    if (!path || !*path || stat(path, &st) != 0) {
        if (loaded_path[0] || !ready) {
            reset_state(0);
            loaded_path[0] = 0;
            ready = 1;
        }
        return;
    }
    if (strcmp(path, loaded_path) == 0 && st.st_ino == loaded_stat.st_ino && st.st_size == loaded_stat.st_size &&
        st.st_mtim.tv_sec == loaded_stat.st_mtim.tv_sec && st.st_mtim.tv_nsec == loaded_stat.st_mtim.tv_nsec)
        return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    for (int i = 0; i < MAX_GPUS; i++) accrue_reasons(i, gpus[i].clock_reasons); /* the old state's time */
    reset_state(1);
    ready = 1;
    char line[1024];
    while (fgets(line, sizeof line, f)) parse_line(line);
    fclose(f);
    snprintf(loaded_path, sizeof loaded_path, "%s", path);
    loaded_stat = st;
}

static double now_seconds(void) {
    if (has_clock) return fake_clock;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- entry and exit of every NVML function ---- */

static void charge(const char *symbol);

static nvmlReturn_t enter(const char *symbol) {
    pthread_mutex_lock(&lock);
    maybe_reload();
    count_call(symbol, -1);
    charge(symbol);
    return init_refcount ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

static void sleep_unlocked(unsigned int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    pthread_mutex_unlock(&lock);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&lock);
    maybe_reload();
}

static double elapsed_us(const struct timespec *since) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - since->tv_sec) * 1e6 + (double)(now.tv_nsec - since->tv_nsec) / 1e3;
}

/* The cost model's charge for one call of symbol; called with the lock held, which it gives up
   while it waits or spins, so that calls on other threads go on meanwhile. */
static void charge(const char *symbol) {
    unsigned int us = strcmp(symbol, "nvmlEventSetWait_v2") == 0 ? 0 : latency_default_us;
    for (int i = 0; i < n_latency_overrides; i++)
        if (strcmp(latency_overrides[i].symbol, symbol) == 0) us = latency_overrides[i].us;
    if (!us) return;
    int spin = latency_spin;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pthread_mutex_unlock(&lock);
    if (spin) {
        while (elapsed_us(&start) < us) {
        }
    } else {
        struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    pthread_mutex_lock(&lock);
    maybe_reload();
}

/* GPU i failing as its state says (delay_ms, hang, lost_after); called with the lock held, which it
   gives up while it sleeps, so the other GPUs' calls go on. 1: the GPU is lost now. */
static int misbehave(int i) {
    if (gpus[i].lost_after && gpu_calls[i] > gpus[i].lost_after) return 1;
    if (gpus[i].delay_ms) sleep_unlocked(gpus[i].delay_ms);
    while (gpus[i].hang) sleep_unlocked(20);
    return 0;
}

static int valid_device(nvmlDevice_t d) { return d >= &gpus[0] && d < &gpus[gpu_count]; }

static nvmlReturn_t enter_device(const char *symbol, nvmlDevice_t d);
static unsigned int power_now_mw(nvmlDevice_t d);
static int power_mode_is(nvmlDevice_t d, const char *mode);
static unsigned int power_reading_mw(nvmlDevice_t d);
static unsigned long long energy_now_mj(nvmlDevice_t d);

/* A MIG device handle of a GPU in MIG mode, within its instances. */
static int valid_mig(nvmlDevice_t d) {
    if (d < &mig_devs[0][0] || d >= &mig_devs[MAX_GPUS][0]) return 0;
    size_t at = (size_t)(d - &mig_devs[0][0]);
    unsigned int gpu = (unsigned int)(at / MAX_MIG), m = (unsigned int)(at % MAX_MIG);
    return gpu < gpu_count && gpus[gpu].mig_mode && m < gpus[gpu].mig_count;
}

/* enter_device for the calls NVML also answers on a MIG device handle (UUID, name, memory,
   processes, instance ids, attributes): counted against the GPU the instance belongs to. */
static nvmlReturn_t enter_any(const char *symbol, nvmlDevice_t d) {
    if (!valid_mig(d)) return enter_device(symbol, d);
    pthread_mutex_lock(&lock);
    maybe_reload();
    if (!valid_mig(d)) {
        count_call(symbol, -1);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    count_call(symbol, d->index);
    charge(symbol);
    if (misbehave(d->index)) return NVML_ERROR_GPU_IS_LOST;
    if (!init_refcount) return NVML_ERROR_UNINITIALIZED;
    if (gpus[d->index].lost) return NVML_ERROR_GPU_IS_LOST;
    for (int i = 0; i < d->n_unsupported; i++)
        if (strcmp(d->unsupported[i], symbol) == 0) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static nvmlReturn_t enter_device(const char *symbol, nvmlDevice_t d) {
    pthread_mutex_lock(&lock);
    maybe_reload();
    if (!valid_device(d)) {
        count_call(symbol, -1);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    count_call(symbol, d->index);
    charge(symbol);
    if (misbehave(d->index)) return NVML_ERROR_GPU_IS_LOST;
    if (!init_refcount) return NVML_ERROR_UNINITIALIZED;
    if (d->lost) return NVML_ERROR_GPU_IS_LOST;
    for (int i = 0; i < d->n_unsupported; i++)
        if (strcmp(d->unsupported[i], symbol) == 0) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static nvmlReturn_t leave(nvmlReturn_t r) {
    pthread_mutex_unlock(&lock);
    return r;
}

static nvmlReturn_t copy_string(char *out, unsigned int length, const char *value) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return NVML_SUCCESS;
}

#define DEVICE_GETTER(symbol, type, expr)                          \
    nvmlReturn_t symbol(nvmlDevice_t device, type *out) {          \
        nvmlReturn_t r = enter_device(#symbol, device);            \
        if (r == NVML_SUCCESS && !out) r = NVML_ERROR_INVALID_ARGUMENT; \
        if (r == NVML_SUCCESS) *out = (type)(expr);                \
        return leave(r);                                           \
    }

/* ---- initialization and system ---- */

static nvmlReturn_t do_init(const char *symbol) {
    pthread_mutex_lock(&lock);
    maybe_reload();
    count_call(symbol, -1);
    charge(symbol);
    if (init_error) return leave((nvmlReturn_t)init_error);
    init_refcount++;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlInit_v2(void) { return do_init("nvmlInit_v2"); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return do_init("nvmlInitWithFlags");
}

nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t r = enter("nvmlShutdown");
    if (r == NVML_SUCCESS) init_refcount--;
    return leave(r);
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t r = enter("nvmlSystemGetDriverVersion");
    if (r == NVML_SUCCESS) r = copy_string(version, length, driver_version);
    return leave(r);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    nvmlReturn_t r = enter("nvmlSystemGetNVMLVersion");
    if (r == NVML_SUCCESS) r = copy_string(version, length, nvml_version);
    return leave(r);
}

static nvmlReturn_t cuda_driver_version(const char *symbol, int *out) {
    nvmlReturn_t r = enter(symbol);
    if (r == NVML_SUCCESS && !out) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) *out = cuda_version;
    return leave(r);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *out) { return cuda_driver_version("nvmlSystemGetCudaDriverVersion", out); }
#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *out) {
    return cuda_driver_version("nvmlSystemGetCudaDriverVersion_v2", out);
}
#endif

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    nvmlReturn_t r = enter("nvmlDeviceGetCount_v2");
    if (r == NVML_SUCCESS && !count) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) *count = gpu_count;
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    nvmlReturn_t r = enter("nvmlDeviceGetHandleByIndex_v2");
    if (r == NVML_SUCCESS && (index >= gpu_count || !device)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        gpu_calls[index]++; /* a call on that GPU for lost_after (counted once above, system-wide) */
        if (misbehave((int)index)) r = NVML_ERROR_GPU_IS_LOST;
    }
    if (r == NVML_SUCCESS && gpus[index].lost) r = NVML_ERROR_GPU_IS_LOST;
    if (r == NVML_SUCCESS) *device = &gpus[index];
    return leave(r);
}

/* ---- identity and topology ---- */

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    nvmlReturn_t r = enter_any("nvmlDeviceGetUUID", device);
    if (r == NVML_SUCCESS) r = copy_string(uuid, length, device->uuid);
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    nvmlReturn_t r = enter_any("nvmlDeviceGetName", device);
    if (r == NVML_SUCCESS && device->parent >= 0) {
        /* As the driver names a MIG device: "NVIDIA A100-SXM4-40GB MIG 1g.5gb". */
        char mig_name[160];
        snprintf(mig_name, sizeof mig_name, "%s MIG %s", gpus[device->parent].name, device->profile);
        r = copy_string(name, length, mig_name);
    } else if (r == NVML_SUCCESS) {
        r = copy_string(name, length, device->name);
    }
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetSerial", device);
    if (r == NVML_SUCCESS) r = copy_string(serial, length, device->serial);
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetPciInfo_v3", device);
    if (r == NVML_SUCCESS && !pci) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        unsigned int domain = 0, bus = 0, dev = 0;
        memset(pci, 0, sizeof *pci);
        sscanf(device->bus_id, "%x:%x:%x", &domain, &bus, &dev);
        pci->domain = domain;
        pci->bus = bus;
        pci->device = dev;
        pci->pciDeviceId = device->pci_device_id;
        snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, domain, bus, dev);
        snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, domain, bus, dev);
    }
    return leave(r);
}

DEVICE_GETTER(nvmlDeviceGetArchitecture, nvmlDeviceArchitecture_t, device->arch)
DEVICE_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, unsigned int, device->pcie_gen_max)
DEVICE_GETTER(nvmlDeviceGetMaxPcieLinkWidth, unsigned int, device->pcie_width_max)
DEVICE_GETTER(nvmlDeviceGetGpuMaxPcieLinkGeneration, unsigned int, device->pcie_gen_gpu_max)
DEVICE_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, unsigned int, device->pcie_gen)
DEVICE_GETTER(nvmlDeviceGetCurrPcieLinkWidth, unsigned int, device->pcie_width)
DEVICE_GETTER(nvmlDeviceGetSupportedEventTypes, unsigned long long, device->supported_events)

/* ---- per-tick gauges ---- */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetUtilizationRates", device);
    if (r == NVML_SUCCESS && !u) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && device->mig_mode) r = NVML_ERROR_NOT_SUPPORTED; /* N/A in MIG mode */
    if (r == NVML_SUCCESS) {
        u->gpu = device->util_gpu;
        u->memory = device->util_mem;
    }
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m) {
    nvmlReturn_t r = enter_any("nvmlDeviceGetMemoryInfo", device);
    if (r == NVML_SUCCESS && !m) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        /* v1 counts reserved memory as used, as the real v1 call does. */
        m->total = device->mem_total;
        m->used = device->mem_used + device->mem_reserved;
        m->free = device->mem_total - m->used;
    }
    return leave(r);
}

#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m) {
    nvmlReturn_t r = enter_any("nvmlDeviceGetMemoryInfo_v2", device);
    if (r == NVML_SUCCESS && !m) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && m->version != nvmlMemory_v2) r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS) {
        m->total = device->mem_total;
        m->reserved = device->mem_reserved;
        m->used = device->mem_used;
        m->free = device->mem_total - device->mem_used - device->mem_reserved;
    }
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *t) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetTemperatureV", device);
    if (r == NVML_SUCCESS && !t) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && t->version != nvmlTemperature_v1) r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS && t->sensorType != NVML_TEMPERATURE_GPU) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) t->temperature = device->temp;
    return leave(r);
}

DEVICE_GETTER(nvmlDeviceGetCurrentClocksEventReasons, unsigned long long, device->clock_reasons)
#endif

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int *temp) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetTemperature", device);
    if (r == NVML_SUCCESS && (!temp || sensor != NVML_TEMPERATURE_GPU)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) *temp = (unsigned int)device->temp;
    return leave(r);
}

DEVICE_GETTER(nvmlDeviceGetCurrentClocksThrottleReasons, unsigned long long, device->clock_reasons)

/* What GA100 answers near-instantly (later GPUs: a 1 s mean); the agent's fallback without field 186.
   As the GPU's power_mode says: not supported where only the energy counter is. */
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *out) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetPowerUsage", device);
    if (r == NVML_SUCCESS && !out) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && power_mode_is(device, "energy")) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) *out = power_reading_mw(device);
    return leave(r);
}

/* mJ since the driver loaded: the draw's integral (with the GPU's read lag) where a power timeline
   drives it, else the state's energy_mj. */
DEVICE_GETTER(nvmlDeviceGetTotalEnergyConsumption, unsigned long long, energy_now_mj(device))

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetClockInfo", device);
    if (r == NVML_SUCCESS && !clock) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && type != NVML_CLOCK_SM && type != NVML_CLOCK_GRAPHICS && type != NVML_CLOCK_MEM)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) *clock = type == NVML_CLOCK_MEM ? device->mem_clock : device->sm_clock;
    return leave(r);
}

/* Encoder (1) or decoder (0) utilization; read after enter_device, which reloads the state. */
static nvmlReturn_t codec_utilization(const char *symbol, int encoder, nvmlDevice_t device, unsigned int *util,
                                      unsigned int *period_us) {
    nvmlReturn_t r = enter_device(symbol, device);
    if (r == NVML_SUCCESS && (!util || !period_us)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *util = encoder ? device->util_enc : device->util_dec;
        *period_us = 167000;
    }
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *util, unsigned int *period_us) {
    return codec_utilization("nvmlDeviceGetEncoderUtilization", 1, device, util, period_us);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *util, unsigned int *period_us) {
    return codec_utilization("nvmlDeviceGetDecoderUtilization", 0, device, util, period_us);
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetPcieThroughput", device);
    if (r == NVML_SUCCESS && !value) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        if (counter == NVML_PCIE_UTIL_TX_BYTES) *value = device->pcie_tx_kbs;
        else if (counter == NVML_PCIE_UTIL_RX_BYTES) *value = device->pcie_rx_kbs;
        else r = NVML_ERROR_INVALID_ARGUMENT;
    }
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos) {
    nvmlReturn_t r = enter_any("nvmlDeviceGetComputeRunningProcesses_v3", device);
    if (r == NVML_SUCCESS && !count) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS) return leave(r);
    /* A GPU in MIG mode lists every instance's processes with their instance ids; an instance its own. */
    struct nvmlDevice_st *sources[MAX_MIG + 1];
    unsigned int nsources = 0, total = 0;
    if (device->parent < 0 && device->mig_mode)
        for (unsigned int m = 0; m < device->mig_count && m < MAX_MIG; m++) sources[nsources++] = &mig_devs[device->index][m];
    else
        sources[nsources++] = device;
    for (unsigned int k = 0; k < nsources; k++) total += sources[k]->nprocs;
    if (*count < total || (total && !infos)) {
        *count = total;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned int n = 0;
    for (unsigned int k = 0; k < nsources; k++) {
        struct nvmlDevice_st *src = sources[k];
        for (unsigned int i = 0; i < src->nprocs; i++, n++) {
            infos[n].pid = src->procs[i].pid;
            infos[n].usedGpuMemory = src->procs[i].mem;
            infos[n].gpuInstanceId = src->parent >= 0 ? src->gi : 0xFFFFFFFFu;
            infos[n].computeInstanceId = src->parent >= 0 ? src->ci : 0xFFFFFFFFu;
        }
    }
    *count = total;
    return leave(r);
}

/* ---- field values ---- */

static int field_unsupported(nvmlDevice_t d, unsigned int f) {
    return f >= FIELD_IDS || (d->unsupported_field[f / 8] & (1u << (f % 8)));
}

/* The link a legacy per-link field id (…_L0 … _L11) names, or -1. */
static int legacy_link(unsigned int f, unsigned int first_l0, unsigned int first_l6) {
    if (f >= first_l0 && f < first_l0 + 6) return (int)(f - first_l0);
    if (f >= first_l6 && f < first_l6 + 6) return (int)(f - first_l6 + 6);
    return -1;
}

static void set_ull(nvmlFieldValue_t *v, unsigned long long x) {
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    v->value.ullVal = x;
}

static void set_ui(nvmlFieldValue_t *v, unsigned int x) {
    /* Only the member named by valueType is defined: poison the rest of the union, so a reader
       that ignores valueType gets garbage, as it could from the real library. */
    v->value.ullVal = 0xDEADBEEF00000000ULL;
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->value.uiVal = x;
}

#ifndef FAKE_NVML_LEGACY
/* Field 308 (nvml.h 13), which an old driver (the legacy build) does not know: NOT_SUPPORTED there. */
static void set_d(nvmlFieldValue_t *v, double x) {
    v->value.ullVal = 0xDEADBEEF00000000ULL;
    v->valueType = NVML_VALUE_TYPE_DOUBLE;
    v->value.dVal = x;
}

/* Whether the state marks a symbol unsupported on this GPU (a field that reads the same sensor is
   not supported either). */
static int symbol_unsupported(nvmlDevice_t d, const char *symbol) {
    for (int i = 0; i < d->n_unsupported; i++)
        if (strcmp(d->unsupported[i], symbol) == 0) return 1;
    return 0;
}

#ifndef NVML_FI_DEV_GPU_TEMP
#define NVML_FI_DEV_GPU_TEMP 308
#endif
#endif

/* The clock-event reasons' durations (nvml.h 13's NVML_FI_DEV_CLOCKS_EVENT_REASON_* fields, ns):
   each reason's counter grows by the host's time (not the state's GPM clock, which may stand
   still) while the state sets its bit. The time up to a reload counts toward the bits the state
   set before it, so a reason a test sets and clears between two ticks is still counted. Kept
   apart from the devices, which a reload rebuilds. The legacy build (an older driver) knows only
   the two perf-policy ids among them (74, 76): 269-271 are NOT_SUPPORTED there. */
#ifndef NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN
#define NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN 269
#define NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN 270
#define NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN 271
#endif
#define REASON_FIELDS 5
static const unsigned int reason_field[REASON_FIELDS] = {
    74 /* SW_POWER_CAP */, 76 /* SYNC_BOOST */, NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,
    NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN};
static const unsigned long long reason_bit[REASON_FIELDS] = {0x4, 0x10, 0x20, 0x40, 0x80};
static unsigned long long reason_ns[MAX_GPUS][REASON_FIELDS];
static double reason_at[MAX_GPUS];
static int reason_seen[MAX_GPUS];

/* Which of the duration fields ``f`` is, or -1. */
static int reason_index(unsigned int f) {
    for (int k = 0; k < REASON_FIELDS; k++)
        if (reason_field[k] == f) return k;
    return -1;
}

/* GPU ``i``'s counters grown by the time since they last grew, for the reasons in ``mask``. */
static void accrue_reasons(int i, unsigned long long mask) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    if (reason_seen[i] && now > reason_at[i]) {
        for (int r = 0; r < REASON_FIELDS; r++)
            if (mask & reason_bit[r]) reason_ns[i][r] += (unsigned long long)((now - reason_at[i]) * 1e9);
    }
    if (!reason_seen[i] || now > reason_at[i]) reason_at[i] = now;
    reason_seen[i] = 1;
}

static unsigned long long reason_duration_ns(nvmlDevice_t d, int k) {
    accrue_reasons(d->index, d->clock_reasons);
    return reason_ns[d->index][k];
}

/* The draw now, in mW: a GPU's draw moves faster than its state file is rewritten (a training
   step computes and waits in sub-second phases), so a test or the lab may keep it in a file of its
   own, $FAKE_NVML_POWER_LIVE: whitespace-separated mW, one per GPU index, re-read at every call
   (tmpfs: cheap). Without the file, or without a number for the GPU, the state's power_mw. */
static unsigned int power_now_mw(nvmlDevice_t d) {
    const char *path = getenv("FAKE_NVML_POWER_LIVE");
    if (!path || !*path) return d->power_mw;
    FILE *f = fopen(path, "r");
    if (!f) return d->power_mw;
    unsigned int out = d->power_mw, value;
    for (int i = 0; i <= d->index && fscanf(f, "%u", &value) == 1; i++)
        if (i == d->index) out = value;
    fclose(f);
    return out;
}

/* A power timeline: the same file may instead hold the draw's recent history, lines
       at GPU SECONDS MW MJ
   (the draw from SECONDS on, on the fake's clock, and the energy counter at SECONDS), in time order.
   Then readings follow the GPU's power_mode, as real boards differ:
     ideal    the draw at now - lag (what GA100 gives, and what field 186 reads);
     sampled  the sensor samples a short window (power_window_ms, 25 ms) every power_period_ms
              (100 ms) and holds the last window's mean: a quarter of the time is seen;
     mean1s   nvmlDeviceGetPowerUsage holds the mean of the last whole second, updated once a
              second; field 186 (instantaneous) not supported;
     energy   no power reading at all (GetPowerUsage and field 186 NOT_SUPPORTED): only the energy
              counter advances.
   The energy counter (field 83, nvmlDeviceGetTotalEnergyConsumption) is the draw's integral at
   now - lag in every mode. */
#define MAX_EDGES 2048
typedef struct { double t, mw, mj; } power_edge;

static int power_timeline(nvmlDevice_t d, power_edge *edges, int max) {
    const char *path = getenv("FAKE_NVML_POWER_LIVE");
    if (!path || !*path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        int gpu;
        double t, mw, mj;
        if (strncmp(line, "at ", 3) != 0) {
            if (n == 0 && line[0] != '#') break; /* the plain format: a draw per GPU */
            continue;
        }
        if (sscanf(line + 3, "%d %lf %lf %lf", &gpu, &t, &mw, &mj) == 4 && gpu == d->index)
            edges[n++] = (power_edge){t, mw, mj};
    }
    fclose(f);
    return n;
}

static int power_mode_is(nvmlDevice_t d, const char *mode) { return strcmp(d->power_mode, mode) == 0; }

/* The last edge at or before x (the first when x precedes them all). */
static int edge_at(const power_edge *e, int n, double x) {
    int i = 0;
    while (i + 1 < n && e[i + 1].t <= x) i++;
    return i;
}

static double energy_at(const power_edge *e, int n, double x) {
    int i = edge_at(e, n, x);
    double dt = x - e[i].t;
    return e[i].mj + (dt > 0 ? e[i].mw * dt : 0);
}

/* The reading now: ideal, or the mean of the last window that ended by now - lag. */
static unsigned int power_reading_mw(nvmlDevice_t d) {
    static power_edge edges[MAX_EDGES];
    int n = power_timeline(d, edges, MAX_EDGES);
    if (!n) return power_now_mw(d);
    double x = now_seconds() - d->power_lag_ms / 1e3;
    double window = 0, period = 0;
    if (power_mode_is(d, "sampled")) window = 0.025, period = 0.1;
    else if (power_mode_is(d, "mean1s")) window = 1.0, period = 1.0;
    if (window <= 0) return (unsigned int)(edges[edge_at(edges, n, x)].mw + 0.5);
    if (d->power_window_ms) window = d->power_window_ms / 1e3;
    if (d->power_period_ms) period = d->power_period_ms / 1e3;
    double offset = d->power_offset_ms / 1e3;
    double q = (x - offset - window) / period, k = (double)(long long)q;
    if (k > q) k -= 1; /* floor */
    double start = offset + k * period;
    return (unsigned int)((energy_at(edges, n, start + window) - energy_at(edges, n, start)) / window + 0.5);
}

static unsigned long long energy_now_mj(nvmlDevice_t d) {
    static power_edge edges[MAX_EDGES];
    int n = power_timeline(d, edges, MAX_EDGES);
    if (!n) return d->energy_mj;
    double mj = energy_at(edges, n, now_seconds() - d->power_lag_ms / 1e3);
    return mj > 0 ? (unsigned long long)mj : 0;
}

static void fill_field(nvmlDevice_t d, nvmlFieldValue_t *v) {
    unsigned int f = v->fieldId, scope = v->scopeId;
    int all_links = scope == UINT_MAX;
    fake_link *link = scope < d->link_count ? &d->links[scope] : NULL;
    v->timestamp = (long long)(now_seconds() * 1e6);
    v->latencyUsec = 0;
    v->nvmlReturn = NVML_SUCCESS;
    if (f < FIELD_IDS) field_requests[d->index][f]++;
    if (field_unsupported(d, f)) {
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return;
    }
    int legacy = legacy_link(f, NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6);
    if (legacy >= 0) {
        if ((unsigned int)legacy < d->link_count) set_ull(v, d->links[legacy].crc_data);
        else v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return;
    }
    int reason = reason_index(f);
    if (reason >= 0) {
#ifdef FAKE_NVML_LEGACY
        if (f > 76) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            return;
        }
#endif
        set_ull(v, reason_duration_ns(d, reason));
        return;
    }
    switch (f) {
    case NVML_FI_DEV_NVLINK_LINK_COUNT: set_ui(v, d->link_count); return;
    case NVML_FI_DEV_PCIE_COUNT_RX_BYTES: set_ull(v, d->pcie_rx_bytes); return;
    case NVML_FI_DEV_PCIE_COUNT_TX_BYTES: set_ull(v, d->pcie_tx_bytes); return;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER: set_ull(v, d->pcie_replay); return;
    case NVML_FI_DEV_ECC_DBE_VOL_TOTAL: set_ull(v, d->ecc_dbe_vol); return;
    case NVML_FI_DEV_ECC_DBE_AGG_TOTAL: set_ull(v, d->ecc_dbe_agg); return;
    case NVML_FI_DEV_REMAPPED_PENDING: set_ui(v, d->remap_pending); return;
    case NVML_FI_DEV_REMAPPED_FAILURE: set_ui(v, d->remap_failure); return;
    case NVML_FI_DEV_REMAPPED_COR: set_ui(v, d->remap_cor); return;
    case NVML_FI_DEV_REMAPPED_UNC: set_ui(v, d->remap_unc); return;
    case NVML_FI_DEV_RETIRED_SBE: set_ull(v, d->retired_sbe); return;
    case NVML_FI_DEV_RETIRED_DBE: set_ull(v, d->retired_dbe); return;
    case NVML_FI_DEV_RETIRED_PENDING: set_ui(v, d->retired_pending); return;
    case NVML_FI_DEV_POWER_INSTANT:
        if (power_mode_is(d, "mean1s") || power_mode_is(d, "energy")) v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        else set_ui(v, power_reading_mw(d));
        return;
    case NVML_FI_DEV_MEMORY_TEMP: set_ui(v, d->mem_temp); return;
    case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: set_ull(v, energy_now_mj(d)); return;
#ifndef FAKE_NVML_LEGACY
    case NVML_FI_DEV_GPU_TEMP:
        /* The GPU's temperature with sub-degree precision, a double; a GPU without the sensor
           (its temperature calls unsupported) has no field either. */
        if (symbol_unsupported(d, "nvmlDeviceGetTemperatureV") || symbol_unsupported(d, "nvmlDeviceGetTemperature"))
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        else
            set_d(v, d->temp + d->temp_fraction);
        return;
#endif
    case NVML_FI_DEV_C2C_LINK_COUNT:
        /* GPUs without NVLink-C2C (every x86-hosted board) do not support the C2C fields. */
        if (d->c2c_links) set_ui(v, d->c2c_links);
        else v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return;
    case NVML_FI_DEV_C2C_LINK_GET_STATUS:
    case NVML_FI_DEV_C2C_LINK_GET_MAX_BW:
        if (!d->c2c_links) v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        else if (scope >= d->c2c_links) v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
        else set_ui(v, f == NVML_FI_DEV_C2C_LINK_GET_STATUS ? 1 : d->c2c_mbps);
        return;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: {
        int tx = f == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
        if (all_links) {
            unsigned long long sum = 0;
            for (unsigned int l = 0; l < d->link_count; l++) sum += tx ? d->links[l].tx_kib : d->links[l].rx_kib;
            set_ull(v, sum);
        } else if (link) {
            set_ull(v, tx ? link->tx_kib : link->rx_kib);
        } else {
            v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
        }
        return;
    }
    case NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES:
    case NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES:
        /* NVLink5's byte counters: the same traffic, counted in bytes. */
        if (link) set_ull(v, (f == NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES ? link->tx_kib : link->rx_kib) * 1024);
        else v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
        return;
    case NVML_FI_DEV_NVLINK_GET_SPEED:
    case NVML_FI_DEV_NVLINK_GET_STATE:
    case NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY:
    case NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY:
    case NVML_FI_DEV_NVLINK_ERROR_DL_CRC:
        if (!link) {
            v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
        } else if (f == NVML_FI_DEV_NVLINK_GET_SPEED) {
            set_ui(v, link->speed_mbps);
        } else if (f == NVML_FI_DEV_NVLINK_GET_STATE) {
            set_ui(v, link->state);
        } else if (f == NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY) {
            set_ull(v, link->replay);
            link->replay += link->replay_step;
        } else if (f == NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY) {
            set_ull(v, link->recovery);
            link->recovery += link->recovery_step;
        } else {
            set_ull(v, link->crc_flit);
        }
        return;
    default:
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetFieldValues", device);
    if (r == NVML_SUCCESS && (!values || count < 0)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        for (int i = 0; i < count; i++) fill_field(device, &values[i]);
    return leave(r);
}

/* ---- GPM (Hopper and newer) ---- */

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    nvmlReturn_t r = enter_device("nvmlGpmQueryDeviceSupport", device);
    if (r == NVML_SUCCESS && !support) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && support->version != NVML_GPM_SUPPORT_VERSION) r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS) support->isSupportedDevice = device->gpm;
    return leave(r);
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    nvmlReturn_t r = enter("nvmlGpmSampleAlloc");
    if (r == NVML_SUCCESS && !sample) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *sample = calloc(1, sizeof **sample);
        if (!*sample) return leave(NVML_ERROR_MEMORY);
        (*sample)->magic = MAGIC_SAMPLE;
        live_samples++;
    }
    return leave(r);
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    nvmlReturn_t r = enter("nvmlGpmSampleFree");
    if (r == NVML_SUCCESS && (!sample || sample->magic != MAGIC_SAMPLE)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        sample->magic = 0;
        free(sample);
        live_samples--;
    }
    return leave(r);
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    nvmlReturn_t r = enter_device("nvmlGpmSampleGet", device);
    if (r == NVML_SUCCESS && (!sample || sample->magic != MAGIC_SAMPLE)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !device->gpm) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        sample->gpu = device->index;
        sample->gi = -1;
        sample->taken = 1;
        sample->t = now_seconds();
        sample->sm_active = device->gpm_sm_active;
        sample->sm_occupancy = device->gpm_sm_occupancy;
        sample->tensor = device->gpm_tensor;
        sample->gr_active = device->gpm_gr_active;
        sample->dram = device->gpm_dram;
        sample->pcie_rx = device->pcie_rx_bytes;
        sample->pcie_tx = device->pcie_tx_bytes;
        sample->nvl_rx_kib = sample->nvl_tx_kib = 0;
        for (unsigned int l = 0; l < device->link_count; l++) {
            sample->nvl_rx_kib += device->links[l].rx_kib;
            sample->nvl_tx_kib += device->links[l].tx_kib;
        }
    }
    return leave(r);
}

static double per_second_mib(unsigned long long a, unsigned long long b, double seconds, double unit) {
    return b >= a ? (double)(b - a) * unit / seconds / (1024.0 * 1024.0) : 0.0;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
    nvmlReturn_t r = enter("nvmlGpmMetricsGet");
    if (r == NVML_SUCCESS && !m) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && m->version != NVML_GPM_METRICS_GET_VERSION) r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r != NVML_SUCCESS) return leave(r);
    nvmlGpmSample_t a = m->sample1, b = m->sample2;
    if (!a || !b || a->magic != MAGIC_SAMPLE || b->magic != MAGIC_SAMPLE || !a->taken || !b->taken ||
        a->gpu != b->gpu || a->gi != b->gi || m->numMetrics > NVML_GPM_METRIC_MAX)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (gpus[a->gpu].lost) return leave(NVML_ERROR_GPU_IS_LOST);
    double dt = b->t - a->t;
    if (dt <= 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned int i = 0; i < m->numMetrics; i++) {
        nvmlGpmMetric_t *x = &m->metrics[i];
        x->nvmlReturn = NVML_SUCCESS;
        x->metricInfo.shortName = x->metricInfo.longName = x->metricInfo.unit = NULL;
        switch (x->metricId) {
        case NVML_GPM_METRIC_SM_UTIL: x->value = b->sm_active; break;
        case NVML_GPM_METRIC_SM_OCCUPANCY: x->value = b->sm_occupancy; break;
        case NVML_GPM_METRIC_ANY_TENSOR_UTIL: x->value = b->tensor; break;
        case NVML_GPM_METRIC_GRAPHICS_UTIL: x->value = b->gr_active; break;
        case NVML_GPM_METRIC_DRAM_BW_UTIL: x->value = b->dram; break;
        case NVML_GPM_METRIC_PCIE_RX_PER_SEC: x->value = per_second_mib(a->pcie_rx, b->pcie_rx, dt, 1); break;
        case NVML_GPM_METRIC_PCIE_TX_PER_SEC: x->value = per_second_mib(a->pcie_tx, b->pcie_tx, dt, 1); break;
        case NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: x->value = per_second_mib(a->nvl_rx_kib, b->nvl_rx_kib, dt, 1024); break;
        case NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: x->value = per_second_mib(a->nvl_tx_kib, b->nvl_tx_kib, dt, 1024); break;
        default: x->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return leave(NVML_SUCCESS);
}

/* ---- NVLink fabric (Hopper and newer on NVSwitch systems, GB200/GB300 NVL72) ---- */

/* The cluster UUID's 16 bytes from its text form (hex digits, dashes ignored); zeros when unset. */
static void cluster_uuid(const char *text, unsigned char out[NVML_GPU_FABRIC_UUID_LEN]) {
    memset(out, 0, NVML_GPU_FABRIC_UUID_LEN);
    int n = 0;
    for (const char *c = text; *c && n < 2 * NVML_GPU_FABRIC_UUID_LEN; c++) {
        int v = *c >= '0' && *c <= '9' ? *c - '0' : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10
              : *c >= 'A' && *c <= 'F' ? *c - 'A' + 10 : -1;
        if (v < 0) continue;
        out[n / 2] |= (unsigned char)(n % 2 ? v : v << 4);
        n++;
    }
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *info) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetGpuFabricInfoV", device);
    if (r == NVML_SUCCESS && !info) r = NVML_ERROR_INVALID_ARGUMENT;
    /* v2 is v3 without healthSummary at the end: the same layout up to healthMask. */
    if (r == NVML_SUCCESS && info->version != nvmlGpuFabricInfo_v2 && info->version != nvmlGpuFabricInfo_v3)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS && device->fabric_state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        cluster_uuid(device->fabric_cluster, info->clusterUuid);
        info->status = (nvmlReturn_t)device->fabric_status;
        info->cliqueId = device->fabric_clique;
        info->state = (nvmlGpuFabricState_t)device->fabric_state;
        info->healthMask = device->fabric_health;
        if (info->version == nvmlGpuFabricInfo_v3) info->healthSummary = (unsigned char)device->fabric_summary;
    }
    return leave(r);
}

/* ---- per-process utilization (time-sliced GPUs) ---- */

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *count, unsigned long long last_seen_us) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetProcessUtilization", device);
    if (r == NVML_SUCCESS && !count) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && device->mig_mode) r = NVML_ERROR_NOT_SUPPORTED; /* as nvml.h says of MIG mode */
    if (r != NVML_SUCCESS) return leave(r);
    /* One sample per process, taken now: none newer than last_seen_us until the clock moves. */
    unsigned long long stamp = (unsigned long long)(now_seconds() * 1e6);
    unsigned int n = stamp > last_seen_us ? device->nputil : 0;
    if (!n) return leave(NVML_ERROR_NOT_FOUND);
    if (!utilization || *count < n) {
        *count = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned int i = 0; i < n; i++) {
        utilization[i].pid = device->putil[i].pid;
        utilization[i].timeStamp = stamp;
        utilization[i].smUtil = device->putil[i].sm;
        utilization[i].memUtil = device->putil[i].mem;
        utilization[i].encUtil = utilization[i].decUtil = 0;
    }
    *count = n;
    return leave(NVML_SUCCESS);
}

/* ---- MIG ---- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetMigMode", device);
    if (r == NVML_SUCCESS && (!current || !pending)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !device->mig_capable) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) *current = *pending = device->mig_mode ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetMaxMigDeviceCount", device);
    if (r == NVML_SUCCESS && !count) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) *count = device->mig_capable && device->mig_mode ? MAX_MIG : 0; /* zero unless enabled */
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig) {
    nvmlReturn_t r = enter_device("nvmlDeviceGetMigDeviceHandleByIndex", device);
    if (r == NVML_SUCCESS && (!mig || index >= MAX_MIG)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !device->mig_capable) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && (!device->mig_mode || index >= device->mig_count)) r = NVML_ERROR_NOT_FOUND;
    if (r == NVML_SUCCESS) *mig = &mig_devs[device->index][index];
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *device) {
    nvmlReturn_t r = enter_any("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig);
    if (r == NVML_SUCCESS && (!device || mig->parent < 0)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) *device = &gpus[mig->parent];
    return leave(r);
}

static nvmlReturn_t instance_id(const char *symbol, nvmlDevice_t mig, unsigned int *id, int compute) {
    nvmlReturn_t r = enter_any(symbol, mig);
    if (r == NVML_SUCCESS && !id) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && mig->parent < 0) r = NVML_ERROR_NOT_SUPPORTED; /* a GPU, not a MIG device */
    if (r == NVML_SUCCESS) *id = compute ? mig->ci : mig->gi;
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t mig, unsigned int *id) {
    return instance_id("nvmlDeviceGetGpuInstanceId", mig, id, 0);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t mig, unsigned int *id) {
    return instance_id("nvmlDeviceGetComputeInstanceId", mig, id, 1);
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t mig, nvmlDeviceAttributes_t *attributes) {
    nvmlReturn_t r = enter_any("nvmlDeviceGetAttributes_v2", mig);
    if (r == NVML_SUCCESS && !attributes) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && mig->parent < 0) r = NVML_ERROR_NOT_SUPPORTED; /* "only supports MIG device handles" */
    if (r == NVML_SUCCESS) {
        memset(attributes, 0, sizeof *attributes);
        attributes->multiprocessorCount = mig->sms;
        attributes->gpuInstanceSliceCount = mig->slices;
        attributes->computeInstanceSliceCount = mig->slices;
        attributes->memorySizeMB = mig->mem_total / (1024 * 1024);
    }
    return leave(r);
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpu_instance_id, nvmlGpmSample_t sample) {
    nvmlReturn_t r = enter_device("nvmlGpmMigSampleGet", device);
    if (r == NVML_SUCCESS && (!sample || sample->magic != MAGIC_SAMPLE)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (!device->gpm || !device->mig_mode)) r = NVML_ERROR_NOT_SUPPORTED;
    struct nvmlDevice_st *instance = NULL;
    for (unsigned int m = 0; r == NVML_SUCCESS && m < device->mig_count && m < MAX_MIG; m++)
        if (mig_devs[device->index][m].gi == gpu_instance_id) {
            instance = &mig_devs[device->index][m];
            break;
        }
    if (r == NVML_SUCCESS && !instance) r = NVML_ERROR_NOT_FOUND;
    if (r == NVML_SUCCESS) {
        memset(&sample->pcie_rx, 0, sizeof *sample - offsetof(struct nvmlGpmSample_st, pcie_rx));
        sample->gpu = device->index;
        sample->gi = (int)gpu_instance_id;
        sample->taken = 1;
        sample->t = now_seconds();
        sample->sm_active = instance->gpm_sm_active;
        sample->sm_occupancy = instance->gpm_sm_occupancy;
        sample->tensor = instance->gpm_tensor;
        sample->gr_active = instance->gpm_gr_active;
        sample->dram = instance->gpm_dram;
    }
    return leave(r);
}

/* ---- events ---- */

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    nvmlReturn_t r = enter("nvmlEventSetCreate");
    if (r == NVML_SUCCESS && !set) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *set = calloc(1, sizeof **set);
        if (!*set) return leave(NVML_ERROR_MEMORY);
        (*set)->magic = MAGIC_SET;
        /* Like the driver, a set sees only what happens after it exists. */
        for (int i = 0; i < n_events; i++)
            if (events[i].seq > (*set)->last_seq) (*set)->last_seq = events[i].seq;
        live_sets++;
    }
    return leave(r);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    nvmlReturn_t r = enter_device("nvmlDeviceRegisterEvents", device);
    if (r == NVML_SUCCESS && (!set || set->magic != MAGIC_SET)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (types & ~device->supported_events)) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) set->masks[device->index] |= types;
    return leave(r);
}

/* The oldest event after the set's last one that the set registered for; -1 when none. */
static int next_event(nvmlEventSet_t set) {
    int best = -1;
    for (int i = 0; i < n_events; i++) {
        fake_event *e = &events[i];
        if (e->seq <= set->last_seq || e->gpu < 0 || e->gpu >= (int)gpu_count) continue;
        if (!(set->masks[e->gpu] & e->type)) continue;
        if (best < 0 || e->seq < events[best].seq) best = i;
    }
    return best;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    nvmlReturn_t r = enter("nvmlEventSetWait_v2");
    if (r == NVML_SUCCESS && (!set || set->magic != MAGIC_SET || !data)) r = NVML_ERROR_INVALID_ARGUMENT;
    while (r == NVML_SUCCESS) {
        int i = next_event(set);
        if (i >= 0) {
            set->last_seq = events[i].seq;
            data->device = &gpus[events[i].gpu];
            data->eventType = events[i].type;
            data->eventData = events[i].data;
            data->gpuInstanceId = events[i].gi;
            data->computeInstanceId = events[i].ci;
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        double waited_ms = (double)(now.tv_sec - start.tv_sec) * 1e3 + (double)(now.tv_nsec - start.tv_nsec) / 1e6;
        if (waited_ms >= timeoutms) {
            r = NVML_ERROR_TIMEOUT;
            break;
        }
        /* Poll without holding the lock, so other threads' calls go on meanwhile. Every 20 ms: the
           driver's wait blocks in the kernel and costs nothing while it waits, and a faster poll
           made the fake's waiting thread the largest CPU cost of an agent on it (17 ms a second). */
        pthread_mutex_unlock(&lock);
        usleep(20000);
        pthread_mutex_lock(&lock);
        maybe_reload();
        if (!init_refcount) r = NVML_ERROR_UNINITIALIZED;
    }
    return leave(r);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    nvmlReturn_t r = enter("nvmlEventSetFree");
    if (r == NVML_SUCCESS && (!set || set->magic != MAGIC_SET)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        set->magic = 0;
        free(set);
        live_sets--;
    }
    return leave(r);
}
