/*
 * A fake libnccl for the tests of package nccl: the entry points the package binds, with
 * NCCL's signatures, working on host memory (the CPU device's buffers), so the tests run
 * without a GPU. The ranks of a group meet across threads as NCCL's do, and the fake
 * records what it was given (the unique id passed by value, each call's words) and can
 * be told to fail a call, through the fake_nccl_* functions.
 *
 * It is C that also compiles as C++: the tests build it with g++, which CI installs.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7
} ncclResult_t;

enum { ncclSum = 0, ncclMax = 2 };
enum { ncclUint64 = 5, ncclFloat32 = 7, ncclFloat64 = 8 };

#define FAKE_VERSION 22703 /* 2.27.3 */
#define MAX_RANKS 16

struct group {
  ncclUniqueId id;
  int nranks;
  int joined;
  /* The round being gathered is done+1; arrived counts its ranks. */
  int arrived;
  unsigned long long done;
  const void* send[MAX_RANKS];
  void* recv[MAX_RANKS];
  size_t count[MAX_RANKS];
  int dtype[MAX_RANKS], op[MAX_RANKS];
  ncclResult_t outcome;
  struct group* next;
};

struct ncclComm {
  struct group* g;
  int rank;
  int device;
  int destroyed;
  ncclUniqueId id; /* as ncclCommInitRank received it */
  uint64_t last[7]; /* the words of the last ncclAllReduce */
};
typedef struct ncclComm* ncclComm_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static struct group* groups; /* the groups ncclCommInitRank is gathering, by id */
static int live;
static int id_serial;
static char last_error[256];
static unsigned char* scratch;
static size_t scratch_size;
static int devlist_n;
static int devlist[MAX_RANKS];

/* Failure injection: the next `times` calls of function `name` return `code`. */
static char fail_name[64];
static int fail_code, fail_times;
static char fail_msg[200];

static void set_error(const char* msg) {
  snprintf(last_error, sizeof last_error, "%s", msg);
}

/* injected returns the code to fail this call of name with, or ncclSuccess; mu held. */
static ncclResult_t injected(const char* name) {
  if (fail_times > 0 && strcmp(fail_name, name) == 0) {
    fail_times--;
    set_error(fail_msg);
    return (ncclResult_t)fail_code;
  }
  return ncclSuccess;
}

void fake_nccl_fail(const char* name, int code, const char* msg, int times) {
  pthread_mutex_lock(&mu);
  snprintf(fail_name, sizeof fail_name, "%s", name);
  snprintf(fail_msg, sizeof fail_msg, "%s", msg);
  fail_code = code;
  fail_times = times;
  pthread_mutex_unlock(&mu);
}

int fake_nccl_live(void) {
  pthread_mutex_lock(&mu);
  int n = live;
  pthread_mutex_unlock(&mu);
  return n;
}

/* fake_nccl_comm copies what comm was made with and its last ncclAllReduce's words. */
void fake_nccl_comm(ncclComm_t comm, unsigned char id[NCCL_UNIQUE_ID_BYTES], int* nranks, int* rank, int* device, uint64_t last[7]) {
  pthread_mutex_lock(&mu);
  memcpy(id, comm->id.internal, NCCL_UNIQUE_ID_BYTES);
  *nranks = comm->g->nranks;
  *rank = comm->rank;
  *device = comm->device;
  memcpy(last, comm->last, sizeof comm->last);
  pthread_mutex_unlock(&mu);
}

/* fake_nccl_devlist copies the device list of the last ncclCommInitAll and returns its length. */
int fake_nccl_devlist(int* out, int max) {
  pthread_mutex_lock(&mu);
  int n = devlist_n;
  for (int i = 0; i < n && i < max; i++) out[i] = devlist[i];
  pthread_mutex_unlock(&mu);
  return n;
}

ncclResult_t ncclGetVersion(int* version) {
  pthread_mutex_lock(&mu);
  ncclResult_t r = injected("ncclGetVersion");
  if (r == ncclSuccess) *version = FAKE_VERSION;
  pthread_mutex_unlock(&mu);
  return r;
}

/* ncclGetUniqueId fills a recognisable id: a name with a serial number, then bytes that
 * count down from 0xff. */
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  pthread_mutex_lock(&mu);
  ncclResult_t r = injected("ncclGetUniqueId");
  if (r == ncclSuccess) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, 32, "fake-nccl-id-%d", ++id_serial);
    for (int i = 32; i < NCCL_UNIQUE_ID_BYTES; i++) id->internal[i] = (char)(0xff - i);
  }
  pthread_mutex_unlock(&mu);
  return r;
}

static struct ncclComm* new_comm(struct group* g, int rank, int device) {
  struct ncclComm* c = (struct ncclComm*)calloc(1, sizeof *c);
  c->g = g;
  c->rank = rank;
  c->device = device;
  live++;
  return c;
}

/* ncclCommInitRank joins the group of id and, as NCCL's does, returns once all nranks
 * ranks have joined. */
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  pthread_mutex_lock(&mu);
  ncclResult_t r = injected("ncclCommInitRank");
  if (r != ncclSuccess) {
    pthread_mutex_unlock(&mu);
    return r;
  }
  if (comm == NULL || nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) {
    set_error("fake: ncclCommInitRank: bad comm, nranks or rank");
    pthread_mutex_unlock(&mu);
    return ncclInvalidArgument;
  }
  struct group* g = groups; /* the groups still gathering */
  while (g != NULL && memcmp(&g->id, &id, sizeof id) != 0) g = g->next;
  if (g == NULL) {
    g = (struct group*)calloc(1, sizeof *g);
    g->id = id;
    g->nranks = nranks;
    g->next = groups;
    groups = g;
  } else if (g->nranks != nranks) {
    set_error("fake: ncclCommInitRank: the id's group has another size");
    pthread_mutex_unlock(&mu);
    return ncclInvalidUsage;
  }
  struct ncclComm* c = new_comm(g, rank, -1);
  c->id = id;
  if (++g->joined == g->nranks) {
    /* Complete: the id is spent, as NCCL's are, and a later group may use it again. */
    struct group** p = &groups;
    while (*p != g) p = &(*p)->next;
    *p = g->next;
  }
  pthread_cond_broadcast(&cond);
  while (g->joined < g->nranks) pthread_cond_wait(&cond, &mu);
  *comm = c;
  pthread_mutex_unlock(&mu);
  return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devs) {
  pthread_mutex_lock(&mu);
  ncclResult_t r = injected("ncclCommInitAll");
  if (r != ncclSuccess) {
    pthread_mutex_unlock(&mu);
    return r;
  }
  if (comms == NULL || ndev < 1 || ndev > MAX_RANKS) {
    set_error("fake: ncclCommInitAll: bad comms or ndev");
    pthread_mutex_unlock(&mu);
    return ncclInvalidArgument;
  }
  struct group* g = (struct group*)calloc(1, sizeof *g);
  g->nranks = g->joined = ndev;
  devlist_n = ndev;
  for (int i = 0; i < ndev; i++) {
    devlist[i] = devs != NULL ? devs[i] : -1;
    comms[i] = new_comm(g, i, devlist[i]);
  }
  pthread_mutex_unlock(&mu);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  pthread_mutex_lock(&mu);
  ncclResult_t r = injected("ncclCommDestroy");
  if (r == ncclSuccess) {
    if (comm == NULL || comm->destroyed) {
      /* The comm is kept, so that a second destroy is seen rather than undefined. */
      set_error("fake: ncclCommDestroy: NULL or already destroyed");
      r = ncclInvalidUsage;
    } else {
      comm->destroyed = 1;
      live--;
    }
  }
  pthread_mutex_unlock(&mu);
  return r;
}

static size_t elem_size(int dtype) {
  switch (dtype) {
    case ncclUint64:
    case ncclFloat64:
      return 8;
    case ncclFloat32:
      return 4;
  }
  return 0;
}

/* fold reduces src into acc, n elements; sums add in the order of the calls (rank order). */
static void fold(unsigned char* acc, const unsigned char* src, size_t n, int dtype, int op) {
  for (size_t i = 0; i < n; i++) {
    if (dtype == ncclUint64) {
      uint64_t a, b;
      memcpy(&a, acc + 8 * i, 8);
      memcpy(&b, src + 8 * i, 8);
      a = op == ncclMax ? (b > a ? b : a) : a + b;
      memcpy(acc + 8 * i, &a, 8);
    } else if (dtype == ncclFloat64) {
      double a, b;
      memcpy(&a, acc + 8 * i, 8);
      memcpy(&b, src + 8 * i, 8);
      a = op == ncclMax ? (b > a ? b : a) : a + b;
      memcpy(acc + 8 * i, &a, 8);
    } else {
      float a, b;
      memcpy(&a, acc + 4 * i, 4);
      memcpy(&b, src + 4 * i, 4);
      a = op == ncclMax ? (b > a ? b : a) : a + b;
      memcpy(acc + 4 * i, &a, 4);
    }
  }
}

/* complete reduces a round whose ranks have all arrived into every rank's recvbuff. */
static void complete(struct group* g) {
  for (int r = 1; r < g->nranks; r++) {
    if (g->count[r] != g->count[0] || g->dtype[r] != g->dtype[0] || g->op[r] != g->op[0]) {
      set_error("fake: ncclAllReduce: the ranks disagree on count, datatype or op");
      g->outcome = ncclInvalidUsage;
      return;
    }
  }
  size_t bytes = g->count[0] * elem_size(g->dtype[0]);
  if (bytes > scratch_size) {
    scratch = (unsigned char*)realloc(scratch, bytes);
    scratch_size = bytes;
  }
  if (bytes > 0) {
    memcpy(scratch, g->send[0], bytes);
    for (int r = 1; r < g->nranks; r++) fold(scratch, (const unsigned char*)g->send[r], g->count[0], g->dtype[0], g->op[0]);
    for (int r = 0; r < g->nranks; r++) memcpy(g->recv[r], scratch, bytes);
  }
  g->outcome = ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, int datatype, int op, ncclComm_t comm, void* stream) {
  pthread_mutex_lock(&mu);
  ncclResult_t r = injected("ncclAllReduce");
  if (r != ncclSuccess) {
    pthread_mutex_unlock(&mu);
    return r;
  }
  if (comm == NULL || comm->destroyed) {
    set_error("fake: ncclAllReduce: NULL or destroyed comm");
    pthread_mutex_unlock(&mu);
    return ncclInvalidArgument;
  }
  uint64_t words[7] = {(uint64_t)(uintptr_t)sendbuff, (uint64_t)(uintptr_t)recvbuff, (uint64_t)count,
                       (uint64_t)datatype, (uint64_t)op, (uint64_t)(uintptr_t)comm, (uint64_t)(uintptr_t)stream};
  memcpy(comm->last, words, sizeof words);
  if (elem_size(datatype) == 0 || (op != ncclSum && op != ncclMax) || (count > 0 && (sendbuff == NULL || recvbuff == NULL))) {
    set_error("fake: ncclAllReduce: unsupported datatype or op, or NULL buffer");
    pthread_mutex_unlock(&mu);
    return ncclInvalidArgument;
  }
  struct group* g = comm->g;
  int rank = comm->rank;
  g->send[rank] = sendbuff;
  g->recv[rank] = recvbuff;
  g->count[rank] = count;
  g->dtype[rank] = datatype;
  g->op[rank] = op;
  unsigned long long round = g->done + 1;
  if (++g->arrived == g->nranks) {
    complete(g);
    g->arrived = 0;
    g->done = round;
    pthread_cond_broadcast(&cond);
  }
  while (g->done < round) pthread_cond_wait(&cond, &mu);
  r = g->outcome;
  pthread_mutex_unlock(&mu);
  return r;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return last_error;
}

#ifdef __cplusplus
}
#endif
