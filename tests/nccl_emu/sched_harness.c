/* Test harness for the generated MSCCL scheduler: stands in for the MSCCL executor.
 *
 * Build: gcc -Wall -Werror -rdynamic -I<gen dir> sched_harness.c -o harness -ldl
 * Run:   ./harness /path/libmsccl-scheduler.so < queries
 * Each query line: FUNC NRANKS RANK COUNT DTYPE OP INPLACE STRAGGLER
 *   (FUNC and DTYPE as mscclFunc_t / ncclDataType_t numbers; STRAGGLER -2 = leave as is, else passed to
 *   collsynth_msccl_set_straggler). Prints, per query, the chosen file's name or "-" (NCCL fallback).
 * mscclLoadAlgo fails for paths containing $CS_FAIL_LOAD. $CS_SET_LATE="4,5,6,7" calls
 * collsynth_msccl_set_late with those ranks once before the queries. Ends with "loads N unloads M".
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msccl_scheduler_interface.h"

static char* gPaths[4096];
static int gLoads = 0, gUnloads = 0;

ncclResult_t mscclLoadAlgo(const char* path, mscclAlgoHandle_t* handle, int rank) {
  const char* fail = getenv("CS_FAIL_LOAD");
  if (fail && *fail && strstr(path, fail)) return ncclInvalidUsage;
  FILE* f = fopen(path, "rb");
  if (!f) return ncclSystemError; /* the executor fails to parse a missing file */
  fclose(f);
  if (gLoads >= 4096 || rank < 0) return ncclInternalError;
  gPaths[gLoads] = strdup(path);
  *handle = 1000 + gLoads;
  gLoads++;
  return ncclSuccess;
}

ncclResult_t mscclUnloadAlgo(mscclAlgoHandle_t handle) {
  if (handle < 1000 || handle >= 1000 + gLoads) return ncclInvalidArgument;
  gUnloads++;
  return ncclSuccess;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: harness LIB\n");
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  mscclSchedulerInterface* s = (mscclSchedulerInterface*)dlsym(lib, "mscclScheduler");
  int (*setStraggler)(int) = (int (*)(int))dlsym(lib, "collsynth_msccl_set_straggler");
  if (!s || !setStraggler) {
    fprintf(stderr, "missing symbols\n");
    return 2;
  }
  if (s->init() != ncclSuccess) {
    printf("init failed\n");
    return 1;
  }
  printf("name %s\n", s->name);
  const char* setLate = getenv("CS_SET_LATE");
  if (setLate) {
    int (*setLateFn)(const int*, int) = (int (*)(const int*, int))dlsym(lib, "collsynth_msccl_set_late");
    int ranks[64], n = 0;
    char* end;
    for (const char* p = setLate; *p && n < 64; p = *end ? end + 1 : end) ranks[n++] = (int)strtol(p, &end, 10);
    if (!setLateFn || setLateFn(ranks, n) != 0) {
      fprintf(stderr, "collsynth_msccl_set_late missing or failed\n");
      return 2;
    }
  }
  static char buf[1 << 20];
  int func, nranks, rank, dtype, op, inplace, straggler;
  size_t count;
  while (scanf("%d %d %d %zu %d %d %d %d", &func, &nranks, &rank, &count, &dtype, &op, &inplace, &straggler) == 8) {
    if (straggler != -2) setStraggler(straggler);
    struct mscclSchedulerParam p;
    memset(&p, 0, sizeof(p));
    p.func = (mscclFunc_t)func;
    p.nRanks = nranks;
    p.rank = rank;
    p.count = count;
    p.dataType = (ncclDataType_t)dtype;
    p.op = (ncclRedOp_t)op;
    p.sendBuff = buf;
    p.recvBuff = buf + 4096;
    if (inplace) {
      size_t shift = (size_t)rank * count * 4; /* the tests use 4-byte types for in-place gathers */
      if (func == mscclFuncAllGather) p.sendBuff = (char*)p.recvBuff + shift;
      else if (func == mscclFuncReduceScatter) p.recvBuff = (char*)p.sendBuff + shift;
      else p.recvBuff = (void*)p.sendBuff;
    }
    p.handle = -1;
    if (s->selectAlgo(&p) != ncclSuccess) {
      printf("error\n");
      continue;
    }
    if (!p.scheduled) {
      printf("-\n");
    } else {
      const char* path = gPaths[p.handle - 1000];
      const char* base = strrchr(path, '/');
      printf("%s\n", base ? base + 1 : path);
    }
  }
  ncclResult_t t = s->teardown();
  printf("loads %d unloads %d teardown %d\n", gLoads, gUnloads, (int)t);
  return 0;
}
