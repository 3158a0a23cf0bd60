/* Test driver: runs a generated collsynth library under the host emulation and checks the results.
 *
 * Build: g++ -std=c++17 -DCOLLSYNTH_HOST_EMULATION -DCS_NAME=<name> -I<this dir> -I<gen dir>
 *            -include <name>.h <gen dir>/<name>.cu driver.cpp
 * Run:   ./driver MODE DTYPE COUNT INPLACE   MODE: rank | scratch | multi | loopback; DTYPE: float|half|bfloat16
 * Prints "OK ..." and exits 0, or prints what is wrong and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#define CS_CAT2(a, b) a##b
#define CS_CAT(a, b) CS_CAT2(a, b)
#define CS_FN(suffix) CS_CAT(CS_CAT(collsynth_, CS_NAME), suffix)

static float value(int rank, size_t idx) { return (float)((idx * 7 + (size_t)rank * 3 + idx / 5) % 8); }

static unsigned short put16(float f, bool bf) { return bf ? csFloatToBf16(f) : csFloatToHalf(f); }
static float get16(unsigned short u, bool bf) { return bf ? csBf16ToFloat(u) : csHalfToFloat(u); }

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: driver MODE DTYPE COUNT INPLACE\n");
    return 2;
  }
  const char* mode = argv[1];
  const char* dt = argv[2];
  size_t count = strtoull(argv[3], NULL, 10);
  bool inplace = atoi(argv[4]) != 0;
  ncclDataType_t dtype = !strcmp(dt, "float") ? ncclFloat32 : !strcmp(dt, "half") ? ncclFloat16 : ncclBfloat16;
  size_t es = dtype == ncclFloat32 ? 4 : 2;
  bool bf = dtype == ncclBfloat16;
  const int n = CS_FN(_nranks)();
  const char* coll = CS_FN(_collective)();
  int c = !strcmp(coll, "allreduce") ? 0 : !strcmp(coll, "reducescatter") ? 1 : 2;
  size_t sendN = c == 1 ? count * n : count, recvN = c == 2 ? count * n : count;

  /* buffers: big enough for the in-place layouts; 16-byte aligned plus an optional odd offset */
  std::vector<char*> sendb(n), recvb(n);
  std::vector<const void*> sp(n);
  std::vector<void*> rp(n);
  size_t misalign = getenv("CS_MISALIGN") ? (size_t)atoi(getenv("CS_MISALIGN")) * es : 0;
  for (int r = 0; r < n; r++) {
    sendb[r] = (char*)aligned_alloc(256, (sendN + recvN) * es + 512) + misalign;
    recvb[r] = (char*)aligned_alloc(256, (sendN + recvN) * es + 512) + misalign;
    memset(recvb[r], 0xff, recvN * es);
    sp[r] = sendb[r];
    rp[r] = recvb[r];
    if (inplace) {
      if (c == 0) sp[r] = recvb[r];
      if (c == 1) rp[r] = sendb[r] + (size_t)r * count * es;
      if (c == 2) sp[r] = recvb[r] + (size_t)r * count * es;
    }
    size_t off = c == 2 ? (size_t)r * count : 0;
    for (size_t i = 0; i < sendN; i++) {
      float v = value(r, off + i);
      if (es == 4)
        ((float*)sp[r])[i] = v;
      else
        ((unsigned short*)sp[r])[i] = put16(v, bf);
    }
  }

  std::vector<ncclComm_t> comms(n);
  std::vector<cudaStream_t> streams(n);
  ncclCommInitAll(comms.data(), n, NULL);
  for (int r = 0; r < n; r++) cudaStreamCreate(&streams[r]);
  size_t need = CS_FN(_scratch_bytes)(count, dtype);
  std::vector<void*> scratch(n);
  for (int r = 0; r < n; r++) cudaMallocAsync(&scratch[r], need, NULL);

  ncclResult_t res = ncclSuccess;
  if (!strcmp(mode, "rank") || !strcmp(mode, "scratch")) {
    /* each rank's call in turn, as separate processes would; nothing runs until the sync */
    for (int r = n - 1; r >= 0 && res == ncclSuccess; r--) {
      if (!strcmp(mode, "rank"))
        res = CS_FN()(sp[r], rp[r], count, dtype, comms[r], streams[r]);
      else
        res = CS_FN(_with_scratch)(sp[r], rp[r], count, dtype, comms[r], streams[r], scratch[r], need);
    }
  } else if (!strcmp(mode, "multi")) {
    res = CS_FN(_multi)(n, sp.data(), rp.data(), count, dtype, comms.data(), streams.data(), NULL);
  } else if (!strcmp(mode, "loopback")) {
    res = CS_FN(_loopback)(sp.data(), rp.data(), count, dtype, streams.data(), scratch.data());
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  if (res != ncclSuccess) {
    printf("FAIL call returned %d: %s\n", (int)res, CS_FN(_last_error)());
    return 1;
  }
  csEmuSynchronize();

  long bad = 0;
  for (int r = 0; r < n; r++) {
    for (size_t i = 0; i < recvN; i++) {
      float want = 0;
      if (c == 2) {
        want = value((int)(i / count), i);
      } else {
        for (int q = 0; q < n; q++) want += value(q, (c == 1 ? (size_t)r * count : 0) + i);
      }
      float got = es == 4 ? ((float*)rp[r])[i] : get16(((unsigned short*)rp[r])[i], bf);
      if (got != want) {
        if (bad < 5) printf("rank %d element %zu: got %g, want %g\n", r, i, got, want);
        bad++;
      }
    }
    /* AllReduce results must be bitwise identical on every rank */
    if (c == 0 && r > 0 && memcmp(rp[r], rp[0], recvN * es) != 0) {
      printf("rank %d's result differs bitwise from rank 0's\n", r);
      bad++;
    }
  }
  if (bad) {
    printf("FAIL %ld wrong elements (%s %s count=%zu inplace=%d)\n", bad, mode, dt, count, (int)inplace);
    return 1;
  }
  printf("OK %s %s count=%zu inplace=%d ranks=%d groups=%ld launches=%ld bytes=%ld scratch=%zu\n", mode, dt, count,
         (int)inplace, n, csEmuGroups, csEmuLaunches, csEmuBytesCopied, need);
  return 0;
}
