/* Packaging check (no GPU needed): calls into whatever libnccl.so.2 the program was linked and
 * loaded with, and checks that it is oxccl (reporting NCCL 2.32.3).
 * Usage: nccl_version [EXPECTED_LIBRARY]
 *   prints "ncclGetVersion <code> from <file>"; exits 0 iff the version is EXPECT_VERSION
 *   (23203) and, if EXPECTED_LIBRARY is given, ncclGetVersion lives in that file (both paths
 *   resolved through symlinks), so a stray system libnccl cannot make the check pass. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

/* What oxccl's ncclGetVersion reports (src/lib.rs NCCL_VERSION_CODE): the newest NCCL whose whole
 * host API it has. nccl.h's NCCL_VERSION_CODE is its header's, which may be newer. */
#ifndef EXPECT_VERSION
#define EXPECT_VERSION 23203
#endif

int main(int argc, char **argv) {
  int version = -1;
  ncclResult_t rc = ncclGetVersion(&version);
  const char *err = ncclGetErrorString(ncclInvalidArgument);
  Dl_info info;
  const char *from = "?";
  if (dladdr((void *)&ncclGetVersion, &info) && info.dli_fname) from = info.dli_fname;
  printf("ncclGetVersion %d from %s\n", version, from);
  if (rc != ncclSuccess || version != EXPECT_VERSION) {
    fprintf(stderr, "nccl_version: expected %d, got %d (rc %d)\n", EXPECT_VERSION, version, (int)rc);
    return 1;
  }
  if (err == NULL || err[0] == '\0') {
    fprintf(stderr, "nccl_version: ncclGetErrorString returned nothing\n");
    return 1;
  }
  if (argc > 1) {
    char want[PATH_MAX], got[PATH_MAX];
    if (!realpath(argv[1], want) || !realpath(from, got) || strcmp(want, got) != 0) {
      fprintf(stderr, "nccl_version: ncclGetVersion came from %s, expected %s\n", from, argv[1]);
      return 1;
    }
  }
  return 0;
}
