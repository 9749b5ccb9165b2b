/*
 * Counts the object allocations (PyObject_Malloc, _Calloc, and _Realloc of NULL) one thread makes:
 * the cost gate's "objects allocated per report" (tests/costs/counting.py). It wraps the object
 * domain's allocator as tracemalloc does, forwarding every call; objects a type takes from its own
 * free list (floats, tuples, lists, dicts) never reach it, so the count is of what does.
 */
#include <Python.h>

static PyMemAllocatorEx original;
static unsigned long long counted;
static unsigned long counting_thread;
static int installed;

static void *count_malloc(void *ctx, size_t size) {
    (void)ctx;
    if (PyThread_get_thread_ident() == counting_thread) counted++;
    return original.malloc(original.ctx, size);
}

static void *count_calloc(void *ctx, size_t n, size_t size) {
    (void)ctx;
    if (PyThread_get_thread_ident() == counting_thread) counted++;
    return original.calloc(original.ctx, n, size);
}

static void *count_realloc(void *ctx, void *p, size_t size) {
    (void)ctx;
    if (!p && PyThread_get_thread_ident() == counting_thread) counted++;
    return original.realloc(original.ctx, p, size);
}

static void count_free(void *ctx, void *p) {
    (void)ctx;
    original.free(original.ctx, p);
}

/* Start counting this thread's allocations (called with the GIL held, through ctypes.pythonapi). */
void alloc_count_start(void) {
    counting_thread = PyThread_get_thread_ident();
    if (installed) return;
    PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &original);
    PyMemAllocatorEx counting = {NULL, count_malloc, count_calloc, count_realloc, count_free};
    PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &counting);
    installed = 1;
}

void alloc_count_stop(void) {
    if (!installed) return;
    PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &original);
    installed = 0;
}

unsigned long long alloc_count_read(void) { return counted; }
