/* NCCL 2.32's parameter API (ncclParamBind, ncclParamGet*, ncclParamGetParameter,
 * ncclParamGetAllParameterKeys, ncclParamDumpAll), as an application sees it. Needs no GPU. It
 * checks NCCL's behaviour, not oxccl's: it passes against NVIDIA's NCCL 2.32.3 libnccl.so.2 as
 * well as against oxccl, so it only uses the keys and values both have (NCCL 2.32.3 registers
 * the NCCL_DEBUG* family, NCCL_SET_THREAD_NAME, NCCL_PARAM_DUMP_ALL and NCCL_NO_CACHE).
 * Exit status 0 only if every check passed.
 *
 *   gcc -std=c11 -Wall -Werror -I include -I $CUDA_INCLUDE ffi-tests/param.c -L <lib dir> -lnccl \
 *       -lpthread -o param && LD_LIBRARY_PATH=<lib dir> ./param
 * (also as C++: g++ -x c++ -std=c++17 ... param.c -x none ...). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <fcntl.h>
#include <pthread.h>
#include "nccl.h"

static int failures = 0;
#define CHECK(cond)                                                       \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                         \
    }                                                                     \
  } while (0)
#define EXPECT(call, code) CHECK((call) == (code))

static ncclParamHandle_t bind(const char* key) {
  ncclParamHandle_t h = NULL;
  EXPECT(ncclParamBind(&h, key), ncclSuccess);
  CHECK(h != NULL);
  return h;
}

/* The key's value as text (ncclParamGetParameter), copied. */
static char* text(const char* key) {
  const char* v = NULL;
  int n = -1;
  EXPECT(ncclParamGetParameter(key, &v, &n), ncclSuccess);
  if (v == NULL) return strdup("(null)");
  CHECK(n == (int)strlen(v));
  return strdup(v);
}

static int text_is(const char* key, const char* want) {
  char* t = text(key);
  int same = strcmp(t, want) == 0;
  if (!same) fprintf(stderr, "%s reads \"%s\", expected \"%s\"\n", key, t, want);
  free(t);
  return same;
}

static int listed(const char* key) {
  const char** table = NULL;
  int n = -1;
  EXPECT(ncclParamGetAllParameterKeys(&table, &n), ncclSuccess);
  for (int i = 0; i < n; i++)
    if (strcmp(table[i], key) == 0) return 1;
  return 0;
}

/* ncclParamDumpAll's output (it prints to stdout), captured through a temporary file. */
static char* dump(void) {
  char path[] = "/tmp/nccl-param-dump-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  fflush(stdout);
  int saved = dup(1);
  dup2(fd, 1);
  ncclParamDumpAll();
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  off_t size = lseek(fd, 0, SEEK_END);
  char* buf = (char*)calloc(1, (size_t)size + 1);
  if (pread(fd, buf, (size_t)size, 0) != (ssize_t)size) failures++;
  close(fd);
  unlink(path);
  return buf;
}

/* Another thread's ncclParamGetParameter leaves this thread's string alone. */
static void* other_thread(void* arg) {
  const char* v = NULL;
  int n = 0;
  (void)arg;
  EXPECT(ncclParamGetParameter("NCCL_SET_THREAD_NAME", &v, &n), ncclSuccess);
  return NULL;
}

int main(void) {
  /* A known starting point: nothing set. */
  const char* vars[] = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_DEBUG_TIMESTAMP_FORMAT",
                        "NCCL_DEBUG_TIMESTAMP_LEVELS", "NCCL_SET_THREAD_NAME", "NCCL_PARAM_DUMP_ALL",
                        "NCCL_NO_CACHE", "NCCL_CONF_FILE"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);

  /* Keys are full, case-sensitive environment names; *out is left alone on failure. */
  ncclParamHandle_t sentinel = (ncclParamHandle_t)(uintptr_t)0x1234;
  const char* bad[] = {"DEBUG", "nccl_debug", "NCCL_DEBUG ", "NCCL_SURELY_NOT_A_PARAM", ""};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ncclParamHandle_t h = sentinel;
    EXPECT(ncclParamBind(&h, bad[i]), ncclInvalidArgument);
    CHECK(h == sentinel);
  }
  {
    ncclParamHandle_t h = sentinel;
    EXPECT(ncclParamBind(&h, NULL), ncclInvalidArgument);
    EXPECT(ncclParamBind(NULL, "NCCL_DEBUG"), ncclInvalidArgument);
    CHECK(bind("NCCL_DEBUG") == bind("NCCL_DEBUG"));
  }

  /* NCCL_DEBUG_SUBSYS is a uint64_t mask, read at each call; no other type reads it. */
  ncclParamHandle_t subsys = bind("NCCL_DEBUG_SUBSYS");
  uint64_t u64 = 0;
  EXPECT(ncclParamGetU64(subsys, &u64), ncclSuccess);
  CHECK(u64 == 0x1081); /* INIT | ENV | BOOTSTRAP */
  CHECK(text_is("NCCL_DEBUG_SUBSYS", "INIT,ENV,BOOTSTRAP"));
  setenv("NCCL_DEBUG_SUBSYS", "INIT,COLL", 1);
  EXPECT(ncclParamGetU64(subsys, &u64), ncclSuccess);
  CHECK(u64 == 0x3);
  CHECK(text_is("NCCL_DEBUG_SUBSYS", "INIT,COLL"));
  setenv("NCCL_DEBUG_SUBSYS", "ALL", 1);
  CHECK(text_is("NCCL_DEBUG_SUBSYS", "ALL"));
  {
    int64_t i64 = 7;
    uint32_t u32 = 7;
    int32_t i32 = 7;
    int16_t i16 = 7;
    int8_t i8 = 7;
    uint16_t u16 = 7;
    uint8_t u8 = 7;
    EXPECT(ncclParamGetI64(subsys, &i64), ncclInvalidArgument);
    EXPECT(ncclParamGetU32(subsys, &u32), ncclInvalidArgument);
    EXPECT(ncclParamGetI32(subsys, &i32), ncclInvalidArgument);
    EXPECT(ncclParamGetI16(subsys, &i16), ncclInvalidArgument);
    EXPECT(ncclParamGetI8(subsys, &i8), ncclInvalidArgument);
    EXPECT(ncclParamGetU16(subsys, &u16), ncclInvalidArgument);
    EXPECT(ncclParamGetU8(subsys, &u8), ncclInvalidArgument);
    CHECK(i64 == 7 && u32 == 7 && i32 == 7 && i16 == 7 && i8 == 7 && u16 == 7 && u8 == 7);
    EXPECT(ncclParamGetU64(NULL, &u64), ncclInvalidArgument);
    EXPECT(ncclParamGetU64(subsys, NULL), ncclInvalidArgument);
  }

  /* Timestamp levels: a uint32_t bitmap of 1 << level. */
  {
    ncclParamHandle_t ts = bind("NCCL_DEBUG_TIMESTAMP_LEVELS");
    uint32_t u32 = 0;
    EXPECT(ncclParamGetU32(ts, &u32), ncclSuccess);
    CHECK(u32 & (1u << 2)); /* WARN by default */
    setenv("NCCL_DEBUG_TIMESTAMP_LEVELS", "INFO", 1);
    EXPECT(ncclParamGetU32(ts, &u32), ncclSuccess);
    CHECK(u32 == (1u << 3));
  }

  /* NCCL_DEBUG is an enum (ncclDebugLogLevel): bytes or text only. */
  {
    ncclParamHandle_t d = bind("NCCL_DEBUG");
    int32_t i32 = 7;
    EXPECT(ncclParamGetI32(d, &i32), ncclInvalidArgument);
    int level = -1, len = -1;
    EXPECT(ncclParamGet(d, &level, sizeof(level), &len), ncclSuccess);
    CHECK(len == (int)sizeof(int) && level == 0);
    CHECK(text_is("NCCL_DEBUG", "<unknown>"));
    setenv("NCCL_DEBUG", "INFO", 1);
    EXPECT(ncclParamGet(d, &level, sizeof(level), &len), ncclSuccess);
    CHECK(level == 3);
    CHECK(text_is("NCCL_DEBUG", "INFO"));
    unsetenv("NCCL_DEBUG");
  }

  /* Strings: ncclParamGet copies the NUL; too small a buffer sets *len to 0. */
  {
    ncclParamHandle_t fmt = bind("NCCL_DEBUG_TIMESTAMP_FORMAT");
    char buf[32];
    int len = -1;
    memset(buf, 'x', sizeof(buf));
    EXPECT(ncclParamGet(fmt, buf, sizeof(buf), &len), ncclSuccess);
    CHECK(len == 9 && strcmp(buf, "[%F %T] ") == 0);
    EXPECT(ncclParamGet(fmt, buf, 9, &len), ncclSuccess);
    CHECK(len == 9);
    EXPECT(ncclParamGet(fmt, buf, 8, &len), ncclInvalidArgument);
    CHECK(len == 0);
    len = -1;
    EXPECT(ncclParamGet(fmt, buf, 0, &len), ncclInvalidArgument);
    CHECK(len == -1);
    EXPECT(ncclParamGet(fmt, NULL, 32, &len), ncclInvalidArgument);
    EXPECT(ncclParamGet(fmt, buf, 32, NULL), ncclInvalidArgument);
    EXPECT(ncclParamGet(NULL, buf, 32, &len), ncclInvalidArgument);
    CHECK(len == -1);

    const char* s = NULL;
    EXPECT(ncclParamGetStr(fmt, &s), ncclSuccess);
    CHECK(s != NULL && strcmp(s, "[%F %T] ") == 0);
    ncclParamHandle_t file = bind("NCCL_DEBUG_FILE");
    EXPECT(ncclParamGetStr(file, &s), ncclSuccess);
    CHECK(s != NULL && s[0] == '\0'); /* unset: "", not NULL */
    EXPECT(ncclParamGet(file, buf, sizeof(buf), &len), ncclSuccess);
    CHECK(len == 1 && buf[0] == '\0');
    setenv("NCCL_DEBUG_FILE", "/tmp/nccl.%h.%p", 1);
    EXPECT(ncclParamGetStr(file, &s), ncclSuccess);
    CHECK(s != NULL && strcmp(s, "/tmp/nccl.%h.%p") == 0);
    unsetenv("NCCL_DEBUG_FILE");
    s = NULL;
    EXPECT(ncclParamGetStr(subsys, &s), ncclInvalidArgument); /* not a string */
    CHECK(s == NULL);
    EXPECT(ncclParamGetStr(fmt, NULL), ncclInvalidArgument);
  }

  /* Booleans: one byte; NCCL's words 1/T/TRUE, 0/F/FALSE. */
  {
    ncclParamHandle_t b = bind("NCCL_SET_THREAD_NAME");
    unsigned char byte = 0xee;
    int len = -1;
    EXPECT(ncclParamGet(b, &byte, 1, &len), ncclSuccess);
    CHECK(len == 1 && byte == 0);
    CHECK(text_is("NCCL_SET_THREAD_NAME", "FALSE"));
    uint8_t u8 = 7;
    EXPECT(ncclParamGetU8(b, &u8), ncclInvalidArgument);
  }

  /* Key-based reads: unknown keys give NULL and 0; the string lives until this thread's next call. */
  {
    const char* v = (const char*)1;
    int n = -1;
    EXPECT(ncclParamGetParameter("NCCL_SURELY_NOT_A_PARAM", &v, &n), ncclInvalidArgument);
    CHECK(v == NULL && n == 0);
    n = -7;
    EXPECT(ncclParamGetParameter(NULL, &v, &n), ncclInvalidArgument);
    EXPECT(ncclParamGetParameter("NCCL_DEBUG", NULL, &n), ncclInvalidArgument);
    EXPECT(ncclParamGetParameter("NCCL_DEBUG", &v, NULL), ncclInvalidArgument);
    CHECK(n == -7);
    EXPECT(ncclParamGetParameter("NCCL_DEBUG_SUBSYS", &v, &n), ncclSuccess);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, NULL) == 0);
    pthread_join(t, NULL);
    CHECK(strcmp(v, "ALL") == 0 && n == 3);
  }

  /* Listings: published keys only, unless NCCL_PARAM_DUMP_ALL is true (read at each call). */
  {
    const char** table = NULL;
    int published = -1, all = -1;
    EXPECT(ncclParamGetAllParameterKeys(&table, &published), ncclSuccess);
    CHECK(published >= 7);
    for (int i = 0; i < published; i++) {
      ncclParamHandle_t h = NULL;
      EXPECT(ncclParamBind(&h, table[i]), ncclSuccess);
    }
    const char* public_keys[] = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_DEBUG_TIMESTAMP_FORMAT",
                                 "NCCL_DEBUG_TIMESTAMP_LEVELS", "NCCL_DEBUG_LEVELS", "NCCL_SET_THREAD_NAME"};
    for (size_t i = 0; i < sizeof(public_keys) / sizeof(public_keys[0]); i++) CHECK(listed(public_keys[i]));
    CHECK(!listed("NCCL_PARAM_DUMP_ALL") && !listed("NCCL_NO_CACHE") && !listed("NCCL_WARN_ENABLE_DEBUG_INFO"));
    setenv("NCCL_PARAM_DUMP_ALL", "t", 1);
    EXPECT(ncclParamGetAllParameterKeys(&table, &all), ncclSuccess);
    CHECK(all >= published + 3);
    CHECK(listed("NCCL_PARAM_DUMP_ALL") && listed("NCCL_NO_CACHE") && listed("NCCL_WARN_ENABLE_DEBUG_INFO"));
    CHECK(text_is("NCCL_PARAM_DUMP_ALL", "TRUE"));
    setenv("NCCL_PARAM_DUMP_ALL", "yes", 1); /* not a bool word: the default, false */
    CHECK(!listed("NCCL_PARAM_DUMP_ALL"));
    EXPECT(ncclParamGetAllParameterKeys(NULL, &all), ncclInvalidArgument);
    EXPECT(ncclParamGetAllParameterKeys(&table, NULL), ncclInvalidArgument);
  }

  /* The dump goes to stdout whatever NCCL_DEBUG says. */
  {
    setenv("NCCL_DEBUG_SUBSYS", "INIT,COLL", 1);
    unsetenv("NCCL_PARAM_DUMP_ALL");
    char* d = dump();
    CHECK(strncmp(d, "=== ncclParam Registry Dump ===\n", 32) == 0);
    CHECK(strstr(d, "\nNCCL_DEBUG_SUBSYS (uint64_t) [") != NULL);
    CHECK(strstr(d, "    Current value=INIT,COLL set_by=EnvPlugin default=INIT,ENV,BOOTSTRAP\n") != NULL);
    CHECK(strstr(d, "NCCL_DEBUG_TIMESTAMP_FORMAT (const char*) [") != NULL);
    CHECK(strstr(d, "    Current value=[%F %T]  set_by=Default default=[%F %T] \n    Accepted value: String\n") != NULL);
    CHECK(strstr(d, "NCCL_PARAM_DUMP_ALL") == NULL);
    free(d);
    setenv("NCCL_PARAM_DUMP_ALL", "1", 1);
    d = dump();
    CHECK(strstr(d, "\nNCCL_PARAM_DUMP_ALL (bool) [Private] ") != NULL);
    CHECK(strstr(d, "    Current value=TRUE set_by=EnvPlugin default=FALSE\n    Accepted value: Boolean: 1/T/TRUE or 0/F/FALSE\n") != NULL);
    free(d);
    unsetenv("NCCL_PARAM_DUMP_ALL");
  }

  /* Every pncclX alias, once. */
  {
    ncclParamHandle_t h = NULL, s = NULL;
    EXPECT(pncclParamBind(&h, "NCCL_DEBUG_SUBSYS"), ncclSuccess);
    EXPECT(pncclParamBind(&s, "NCCL_DEBUG_FILE"), ncclSuccess);
    uint64_t u64v = 0;
    int64_t i64 = 0;
    int32_t i32 = 0;
    int16_t i16 = 0;
    int8_t i8 = 0;
    uint32_t u32 = 0;
    uint16_t u16 = 0;
    uint8_t u8 = 0;
    EXPECT(pncclParamGetU64(h, &u64v), ncclSuccess);
    CHECK(u64v == 0x3);
    EXPECT(pncclParamGetI64(h, &i64), ncclInvalidArgument);
    EXPECT(pncclParamGetI32(h, &i32), ncclInvalidArgument);
    EXPECT(pncclParamGetI16(h, &i16), ncclInvalidArgument);
    EXPECT(pncclParamGetI8(h, &i8), ncclInvalidArgument);
    EXPECT(pncclParamGetU32(h, &u32), ncclInvalidArgument);
    EXPECT(pncclParamGetU16(h, &u16), ncclInvalidArgument);
    EXPECT(pncclParamGetU8(h, &u8), ncclInvalidArgument);
    const char* str = NULL;
    EXPECT(pncclParamGetStr(s, &str), ncclSuccess);
    char buf[16];
    int len = 0;
    EXPECT(pncclParamGet(h, buf, sizeof(buf), &len), ncclSuccess);
    CHECK(len == 8);
    const char* v = NULL;
    EXPECT(pncclParamGetParameter("NCCL_DEBUG_SUBSYS", &v, &len), ncclSuccess);
    CHECK(v != NULL && strcmp(v, "INIT,COLL") == 0);
    const char** table = NULL;
    EXPECT(pncclParamGetAllParameterKeys(&table, &len), ncclSuccess);
    CHECK(len > 0);
    fflush(stdout);
    int saved = dup(1);
    int null_fd = open("/dev/null", O_WRONLY);
    dup2(null_fd, 1);
    pncclParamDumpAll();
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(null_fd);
  }

  if (failures) {
    fprintf(stderr, "param: %d check(s) failed\n", failures);
    return 1;
  }
  printf("param: all checks passed\n");
  return 0;
}
