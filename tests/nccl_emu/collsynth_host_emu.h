/* Test-only host stand-in for the parts of CUDA and NCCL that collsynth's generated library uses.
 *
 * Compile the generated <name>.cu with -DCOLLSYNTH_HOST_EMULATION and this directory on the include
 * path. Streams are queues of deferred actions; nothing runs until csEmuSynchronize() (or a
 * cudaStream/DeviceSynchronize), which runs every stream's actions in order across all streams:
 * memcpy and add-kernel actions run, event waits block until the event's record has run, and a
 * group of ncclSend/ncclRecv completes when every one of its operations has met its partner. Sends
 * and receives between an ordered pair match one for one in posting order with equal byte counts, as
 * NCCL requires; a mismatch, an overlapping copy or a deadlock aborts with a message. Device memory
 * is host memory; fresh allocations are filled with 0xff (NaN) so that reading unwritten scratch
 * shows up in the results.
 */
#ifndef COLLSYNTH_HOST_EMU_H_
#define COLLSYNTH_HOST_EMU_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <deque>
#include <functional>
#include <map>
#include <utility>
#include <vector>

/* ------------------------------------------------------------------------------------------ types */
typedef enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 } cudaError_t;
enum cudaMemcpyKind { cudaMemcpyDeviceToDevice = 3 };
#define cudaEventDisableTiming 0x02
struct uint4 {
  unsigned int x, y, z, w;
};
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5
} ncclResult_t;
typedef enum {
  ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9
} ncclDataType_t;

struct csEmuP2p;
struct csEmuEvent {
  unsigned long recorded = 0, done = 0;
};
struct csEmuAction {
  int kind; /* 0 run fn, 1 record event, 2 wait event, 3 p2p group */
  std::function<void()> fn;
  csEmuEvent* ev = nullptr;
  unsigned long gen = 0;
  std::vector<csEmuP2p*> ops;
};
struct csEmuStream {
  std::deque<csEmuAction> q;
};
struct csEmuWorld;
struct csEmuComm {
  csEmuWorld* world;
  int rank, nranks, dev;
};
struct csEmuP2p {
  bool send;
  char* buf;
  size_t bytes;
  int self, peer;
  csEmuWorld* world;
  bool active = false, done = false;
};
struct csEmuWorld {
  int nranks;
  std::map<std::pair<int, int>, std::deque<csEmuP2p*>> sends, recvs; /* key (src, dst) */
};
typedef csEmuStream* cudaStream_t;
typedef csEmuEvent* cudaEvent_t;
typedef csEmuComm* ncclComm_t;

/* ------------------------------------------------------------------------------------------ state */
inline csEmuStream csEmuDefault;
inline std::vector<csEmuStream*> csEmuAllStreams{&csEmuDefault};
inline std::vector<std::pair<ncclComm_t, csEmuStream*>> csEmuPendingStreams;
inline std::vector<std::pair<csEmuStream*, csEmuP2p*>> csEmuPending;
inline int csEmuGroupDepth = 0;
inline int csEmuDevice = 0;
inline long csEmuBytesCopied = 0, csEmuGroups = 0, csEmuLaunches = 0;

#define CS_EMU_FAIL(...)                            \
  do {                                              \
    fprintf(stderr, "collsynth host emulation: ");  \
    fprintf(stderr, __VA_ARGS__);                   \
    fprintf(stderr, "\n");                          \
    abort();                                        \
  } while (0)

inline csEmuStream* csEmuS(cudaStream_t s) { return s ? s : &csEmuDefault; }

/* ------------------------------------------------------------------------------------------ half/bf16 */
inline float csHalfToFloat(unsigned short h) {
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
  if (e == 0) {
    if (m == 0) {
      x = s;
    } else {
      int k = 0;
      while (!(m & 0x400)) {
        m <<= 1;
        k++;
      }
      x = s | ((uint32_t)(113 - k) << 23) | ((m & 0x3ff) << 13);
    }
  } else if (e == 0x1f) {
    x = s | 0x7f800000u | (m << 13);
  } else {
    x = s | ((e + 112) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}
inline unsigned short csFloatToHalf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
  if (e == 0xff) return (unsigned short)(sign | 0x7c00 | (m ? 0x200 : 0));
  int E = (int)e - 127 + 15;
  if (E >= 0x1f) return (unsigned short)(sign | 0x7c00);
  if (E <= 0) {
    if (E < -10) return (unsigned short)sign;
    m |= 0x800000;
    int shift = 14 - E;
    uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (hm & 1))) hm++;
    return (unsigned short)(sign | hm);
  }
  uint32_t out = sign | ((uint32_t)E << 10) | (m >> 13), rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (out & 1))) out++;
  return (unsigned short)out;
}
inline float csBf16ToFloat(unsigned short u) {
  uint32_t x = (uint32_t)u << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}
inline unsigned short csFloatToBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (unsigned short)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (unsigned short)(x >> 16);
}

/* ------------------------------------------------------------------------------------------ CUDA */
inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) {
  *d = csEmuDevice;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) {
  csEmuDevice = d;
  return cudaSuccess;
}
inline void csEmuPush(cudaStream_t s, csEmuAction a) { csEmuS(s)->q.push_back(std::move(a)); }
inline cudaError_t csEmuRun(cudaStream_t s, std::function<void()> fn) {
  csEmuAction a;
  a.kind = 0;
  a.fn = std::move(fn);
  csEmuPush(s, std::move(a));
  return cudaSuccess;
}
template <class F>
cudaError_t csEmuLaunch(cudaStream_t s, F fn) {
  csEmuLaunches++;
  return csEmuRun(s, std::function<void()>(fn));
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new csEmuStream();
  csEmuAllStreams.push_back(*s);
  return cudaSuccess;
}
inline cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) {
  size_t n = (bytes + 255) / 256 * 256;
  *p = aligned_alloc(256, n ? n : 256);
  if (!*p) return cudaErrorMemoryAllocation;
  memset(*p, 0xff, n);
  return cudaSuccess;
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t s) { return csEmuRun(s, [p]() { free(p); }); }
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t s) {
  return csEmuRun(s, [dst, src, bytes]() {
    const char *a = (const char*)src, *b = (const char*)dst;
    if (a != b && a < b + bytes && b < a + bytes) CS_EMU_FAIL("cudaMemcpyAsync of overlapping ranges");
    memcpy(dst, src, bytes);
    csEmuBytesCopied += (long)bytes;
  });
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new csEmuEvent();
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; } /* leaked: tests are short */
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  csEmuAction a;
  a.kind = 1;
  a.ev = e;
  a.gen = ++e->recorded;
  csEmuPush(s, std::move(a));
  return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  csEmuAction a;
  a.kind = 2;
  a.ev = e;
  a.gen = e->recorded;
  csEmuPush(s, std::move(a));
  return cudaSuccess;
}

/* Run everything; abort on deadlock. */
inline void csEmuSynchronize(void) {
  for (;;) {
    bool progress = false, left = false;
    for (csEmuStream* s : csEmuAllStreams) {
      while (!s->q.empty()) {
        csEmuAction& a = s->q.front();
        if (a.kind == 0) {
          a.fn();
        } else if (a.kind == 1) {
          a.ev->done = a.gen;
        } else if (a.kind == 2) {
          if (a.ev->done < a.gen) break;
        } else {
          bool all = true;
          for (csEmuP2p* op : a.ops) {
            op->active = true;
            all = all && op->done;
          }
          if (!all) break;
          for (csEmuP2p* op : a.ops) delete op;
        }
        s->q.pop_front();
        progress = true;
      }
      if (!s->q.empty()) left = true;
    }
    /* match active sends and receives per ordered pair */
    std::vector<csEmuWorld*> worlds;
    for (csEmuStream* s : csEmuAllStreams)
      if (!s->q.empty() && s->q.front().kind == 3)
        for (csEmuP2p* op : s->q.front().ops) worlds.push_back(op->world);
    for (csEmuWorld* w : worlds) {
      for (auto& kv : w->sends) {
        auto& sq = kv.second;
        auto& rq = w->recvs[kv.first];
        while (!sq.empty() && !rq.empty() && sq.front()->active && rq.front()->active) {
          csEmuP2p *snd = sq.front(), *rcv = rq.front();
          if (snd->bytes != rcv->bytes)
            CS_EMU_FAIL("rank %d sends %zu bytes to rank %d, which receives %zu", snd->self, snd->bytes, rcv->self,
                        rcv->bytes);
          memcpy(rcv->buf, snd->buf, snd->bytes);
          csEmuBytesCopied += (long)snd->bytes;
          snd->done = rcv->done = true;
          sq.pop_front();
          rq.pop_front();
          progress = true;
        }
      }
    }
    if (!left) return;
    if (!progress) CS_EMU_FAIL("deadlock: streams wait on each other or on unmatched sends/receives");
  }
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
  csEmuSynchronize();
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize(void) {
  csEmuSynchronize();
  return cudaSuccess;
}

/* ------------------------------------------------------------------------------------------ NCCL */
inline const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated error"; }
inline ncclResult_t ncclCommInitAll(ncclComm_t* comms, int n, const int* devs) {
  csEmuWorld* w = new csEmuWorld();
  w->nranks = n;
  for (int r = 0; r < n; r++) comms[r] = new csEmuComm{w, r, n, devs ? devs[r] : r};
  return ncclSuccess;
}
inline ncclResult_t ncclCommCount(ncclComm_t c, int* n) {
  *n = c->nranks;
  return ncclSuccess;
}
inline ncclResult_t ncclCommUserRank(ncclComm_t c, int* r) {
  *r = c->rank;
  return ncclSuccess;
}
inline ncclResult_t ncclCommCuDevice(ncclComm_t c, int* d) {
  *d = c->dev;
  return ncclSuccess;
}
inline size_t csEmuTypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}
inline ncclResult_t ncclGroupStart(void) {
  csEmuGroupDepth++;
  return ncclSuccess;
}
inline ncclResult_t ncclGroupEnd(void) {
  if (csEmuGroupDepth <= 0) return ncclInvalidUsage;
  if (--csEmuGroupDepth) return ncclSuccess;
  /* one action per (comm, stream), ops in posting order */
  std::vector<std::pair<ncclComm_t, csEmuStream*>> keys = csEmuPendingStreams;
  for (auto& key : keys) {
    csEmuAction a;
    a.kind = 3;
    for (size_t i = 0; i < csEmuPending.size(); i++) {
      csEmuP2p* op = csEmuPending[i].second;
      if (csEmuPending[i].first == key.second && op->world == key.first->world && op->self == key.first->rank)
        a.ops.push_back(op);
    }
    for (csEmuP2p* op : a.ops) {
      auto k = op->send ? std::make_pair(op->self, op->peer) : std::make_pair(op->peer, op->self);
      (op->send ? op->world->sends : op->world->recvs)[k].push_back(op);
    }
    csEmuGroups++;
    csEmuPush(key.second, std::move(a));
  }
  csEmuPending.clear();
  csEmuPendingStreams.clear();
  return ncclSuccess;
}
inline ncclResult_t csEmuPost(bool send, const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                              cudaStream_t s) {
  if (peer < 0 || peer >= c->nranks || peer == c->rank) return ncclInvalidArgument;
  bool implicit = csEmuGroupDepth == 0;
  if (implicit) ncclGroupStart();
  csEmuP2p* op = new csEmuP2p{send, (char*)buf, count * csEmuTypeSize(t), c->rank, peer, c->world};
  csEmuPending.push_back({csEmuS(s), op});
  bool known = false;
  for (auto& k : csEmuPendingStreams) known = known || (k.first == c && k.second == csEmuS(s));
  if (!known) csEmuPendingStreams.push_back({c, csEmuS(s)});
  if (implicit) return ncclGroupEnd();
  return ncclSuccess;
}
inline ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return csEmuPost(true, buf, count, t, peer, c, s);
}
inline ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return csEmuPost(false, buf, count, t, peer, c, s);
}

#endif /* COLLSYNTH_HOST_EMU_H_ */
