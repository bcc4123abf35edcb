/* Probe-only PJRT shim (NOT the collector): forwards everything to the plugin named by
 * $TPUSCOPE_PROBE_REAL_PLUGIN, except that PJRT_Client_Create drops the create options listed
 * in $TPUSCOPE_PROBE_DROP_OPTIONS (comma separated; default "premapped_buffer_size").
 * Used only to check that torch_tpu's device comes up on the CPU plugin once that option is gone.
 *   gcc -shared -fPIC -O2 -o /tmp/tpuscope_probe_shim.so drop_option_shim.c -ldl
 * Layout (PJRT C API >= 0.57): PJRT_Api = {size_t, ext*, PJRT_Api_Version(24 bytes), fn ptrs...};
 * PJRT_Client_Create is the 11th fn pointer (byte offset 120). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *(*create_fn)(void *args);
typedef struct {
  size_t struct_size;
  void *extension_start;
  const char *name;
  size_t name_size;
  /* type, union value, value_size follow; copied as raw bytes */
} NamedValueHead;
typedef struct {
  size_t struct_size;
  void *extension_start;
  const void *create_options;
  size_t num_options;
} ClientCreateHead;

#define CLIENT_CREATE_OFFSET 120
static create_fn real_create;
static unsigned char *table;

static int dropped(const char *name, size_t n) {
  const char *list = getenv("TPUSCOPE_PROBE_DROP_OPTIONS");
  if (!list) list = "premapped_buffer_size";
  const char *p = list;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && memcmp(p, name, n) == 0) return 1;
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

static void *shim_create(void *vargs) {
  ClientCreateHead *args = vargs;
  if (args->num_options == 0 || !args->create_options) return real_create(vargs);
  const unsigned char *src = args->create_options;
  size_t stride = ((const NamedValueHead *)src)->struct_size;
  unsigned char *dst = malloc(stride * args->num_options);
  size_t kept = 0;
  for (size_t i = 0; i < args->num_options; i++) {
    const NamedValueHead *nv = (const NamedValueHead *)(src + i * stride);
    if (dropped(nv->name, nv->name_size)) {
      fprintf(stderr, "[probe-shim] dropped create option %.*s\n", (int)nv->name_size, nv->name);
      continue;
    }
    memcpy(dst + kept * stride, nv, stride);
    kept++;
  }
  const void *saved = args->create_options;
  size_t saved_n = args->num_options;
  args->create_options = dst;
  args->num_options = kept;
  void *err = real_create(vargs);
  args->create_options = saved;
  args->num_options = saved_n;
  free(dst);
  return err;
}

const void *GetPjrtApi(void) {
  if (table) return table;
  const char *path = getenv("TPUSCOPE_PROBE_REAL_PLUGIN");
  if (!path) { fprintf(stderr, "[probe-shim] TPUSCOPE_PROBE_REAL_PLUGIN not set\n"); return NULL; }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "[probe-shim] dlopen: %s\n", dlerror()); return NULL; }
  const void *(*get)(void) = (const void *(*)(void))dlsym(h, "GetPjrtApi");
  if (!get) { fprintf(stderr, "[probe-shim] no GetPjrtApi in %s\n", path); return NULL; }
  const unsigned char *real = get();
  size_t size = *(const size_t *)real;
  table = malloc(size);
  memcpy(table, real, size);
  memcpy(&real_create, table + CLIENT_CREATE_OFFSET, sizeof real_create);
  create_fn mine = shim_create;
  memcpy(table + CLIENT_CREATE_OFFSET, &mine, sizeof mine);
  return table;
}
