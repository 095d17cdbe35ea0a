// gRPC's C++ API behind a small C ABI, for commbench's grpc-cpp transport (loaded with ctypes, whose
// calls release the GIL). Built by launchers/setup.sh (python -m commbench.transports._grpc_cpp).
//
// One engine per rank: a gRPC server with a generic (raw-bytes) service, one channel and generic stub
// per peer, and ONE completion queue for everything. Whoever calls in drives the queue in its own
// thread (as the C++ reference ping-pong does): no hand-off between threads on the timed path. An idle
// driver thread polls the queue only while no call has been made for IDLE_AFTER, so that a rank sitting
// in a barrier still answers gRPC's handshakes and flow control; a call takes the queue back at once
// (an alarm wakes the idle driver).
//
// Methods: /cb<token>/<Kind><rank>, Kind one of Deliver (unary one-way message), DeliverStream (one-way
// messages on a client stream), Exchange (unary call), ExchangeStream (calls on a bidi stream). A call
// whose path lacks the run token gets UNIMPLEMENTED. Messages are iovecs: sent from static slices over
// the caller's buffers (no copy; a send returns once gRPC has written them), received by one copy from
// gRPC's slices into the caller's buffers. A unary one-way message is a generic call written as one
// request (an 8-byte sequence number, then the buffers) and answered with an empty reply.
//
// Calls are plain gRPC (no per-message seal: it would be timed), so someone who sees a run's traffic
// learns its method names. What such a caller can do is bounded: a message larger than the run's largest
// (the engine's max_receive) is refused by gRPC itself; a unary one-way message numbered out of its
// link's sequence (one received already, or more than kAhead past those received in order), or a second
// stream of the same kind on one link, is refused and breaks the link naming the tampering.
#include <grpcpp/alarm.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kOk = 0, kTick = 1, kFail = -1;
constexpr size_t kMaxInFlight = 1024;                      // unary one-way sends not yet answered
constexpr uint64_t kAhead = kMaxInFlight + 2;  // no sender's message arrives further past those in order
constexpr auto kIdleAfter = std::chrono::milliseconds(20);  // no call for this long: the idle driver polls
constexpr auto kYieldKick = std::chrono::microseconds(2000);  // a driver that yielded wants the queue back by then
enum Kind { kDeliver, kDeliverStream, kExchange, kExchangeStream };
const char* const kKindNames[] = {"Deliver", "DeliverStream", "Exchange", "ExchangeStream"};

gpr_timespec After(double seconds) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_micros(static_cast<int64_t>(seconds * 1e6),
                                                                         GPR_TIMESPAN));
}

struct Op {  // a completion-queue tag
  virtual void Done(bool ok) = 0;
  virtual ~Op() = default;
};

struct Flag final : Op {
  bool done = true, ok = true;
  void Arm() { done = ok = false; }
  void Done(bool o) override { done = true, ok = o; }
};

// A commbench Message: its buffers as an iovec, and a byte buffer of static slices over them.
struct Msg {
  std::vector<std::pair<char*, size_t>> iov;
  size_t nbytes = 0;
  grpc::ByteBuffer out;
};

class Engine;
struct ServerCall;

struct Link {
  int peer;
  std::string deliver, exchange;  // method paths on the peer
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  std::unique_ptr<grpc::ClientContext> dctx, xctx;  // the client streams (stream mode)
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> dstream, xstream;
  Flag dwrite, xwrite, xread, started;
  grpc::ByteBuffer xreply;
  std::deque<struct UnarySend*> sends;  // unary one-way messages in flight
  uint64_t next_out = 0;
  // receiving
  std::map<uint64_t, std::pair<grpc::ByteBuffer, size_t>> inbox;  // seq -> (message, offset of the payload)
  uint64_t next_in = 0, stream_in = 0, in_order = 0;  // in_order: every message numbered below it arrived
  bool dstream_seen = false, xstream_seen = false;  // a peer opens one stream of each kind on its link
  bool in_closed = false, ex_closed = false;
  std::deque<ServerCall*> exchanges;  // requests waiting for serve()
  ServerCall* current = nullptr;      // the request being served (serve_next .. serve_reply)
  uint64_t replies_posted = 0, replies_done = 0;
  std::string broken;  // why this link cannot be used any more
};

// A unary one-way message: one request (its sequence number, then the caller's buffers) and an empty
// reply, through the generic call API so that the write's completion is seen: the caller's buffers are
// free once gRPC has written them, and the reply and status are collected later (Reap).
struct UnarySend {
  grpc::ClientContext ctx;
  grpc::ByteBuffer reply;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> rpc;
  Flag wrote, read, finished;
  bool written() const { return wrote.done; }
  bool done() const { return written() && read.done && finished.done; }
};

bool Scatter(const grpc::ByteBuffer& bb, size_t skip, const Msg* m, std::vector<grpc::Slice>* scratch) {
  if (bb.Length() != skip + m->nbytes) return false;
  scratch->clear();
  if (!bb.Dump(scratch).ok()) return false;
  size_t seg = 0, segoff = 0;
  for (const grpc::Slice& s : *scratch) {
    const char* p = reinterpret_cast<const char*>(s.begin());
    size_t left = s.size();
    if (skip) {
      size_t k = std::min(skip, left);
      p += k, left -= k, skip -= k;
    }
    while (left) {
      while (seg < m->iov.size() && segoff == m->iov[seg].second) ++seg, segoff = 0;
      size_t k = std::min(left, m->iov[seg].second - segoff);
      std::memcpy(m->iov[seg].first + segoff, p, k);
      p += k, left -= k, segoff += k;
    }
  }
  return true;
}

uint64_t SeqOf(const grpc::ByteBuffer& bb, std::vector<grpc::Slice>* scratch) {
  unsigned char b[8] = {0};
  size_t got = 0;
  scratch->clear();
  if (bb.Length() < 8 || !bb.Dump(scratch).ok()) return UINT64_MAX;
  for (const grpc::Slice& s : *scratch) {
    for (size_t i = 0; i < s.size() && got < 8; ++i) b[got++] = s.begin()[i];
    if (got == 8) break;
  }
  uint64_t v;
  std::memcpy(&v, b, 8);  // little-endian hosts (x86-64, aarch64)
  return v;
}

class Engine {
 public:
  Engine(const std::string& token, int rank, double timeout, int max_receive)
      : token_(token), rank_(rank), timeout_(timeout), max_receive_(max_receive) {}

  bool Start(const std::string& host, int port, const std::vector<int>& peers) {
    for (int p : peers) {
      auto link = std::make_unique<Link>();
      link->peer = p;
      links_[p] = std::move(link);
    }
    grpc::ServerBuilder builder;
    builder.SetMaxReceiveMessageSize(max_receive_);
    builder.SetMaxSendMessageSize(-1);
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.AddListeningPort(host + ":" + std::to_string(port), grpc::InsecureServerCredentials(), &port_);
    builder.RegisterAsyncGenericService(&service_);
    cq_ = builder.AddCompletionQueue();
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) {
      error_ = "cannot listen on " + host + ":" + std::to_string(port) + " (address in use?)";
      cq_->Shutdown();
      void* tag;
      bool ok;
      while (cq_->Next(&tag, &ok)) {
      }
      return false;
    }
    grpc::Slice nothing;
    empty_ = grpc::ByteBuffer(&nothing, 1);
    Accept();
    idle_ = std::thread([this] { IdleLoop(); });
    return true;
  }

  int port() const { return port_; }
  const char* error() const { return error_.c_str(); }
  double timeout() const { return timeout_; }

  // Everything below runs between Enter() and Leave(): one thread drives the queue at a time. Threads of
  // one rank may call in at once (the PS emulator serves each worker from its own thread): they queue in
  // arrival order (a thread that leaves and comes straight back goes to the end of the line: no thread
  // starves); a caller arriving from outside kicks the current driver (an alarm), and no driver blocks
  // on the queue while such a caller waits; drivers waiting for events take turns, one event each.
  void Enter() { Take(std::chrono::steady_clock::now(), false); }
  void Leave() {
    bool wake;
    {
      std::lock_guard<std::mutex> l(m_);
      driving_ = false;
      left_at_ = std::chrono::steady_clock::now();
      wake = waiting_.load() || idle_waits_;  // not the idle driver's timed wait: no wake-up per call
    }
    if (wake) cv_.notify_all();
  }

  // Hand the queue to a waiting thread and wait to get it back, kicking the driver after kYieldKick
  // (or at this caller's deadline, if sooner). Waiting for the driver's next event instead stalled the
  // PS emulator's threads for whole 0.5 s budgets (ps-throughput --rpc tf: 1-4 steps/s against 35-42
  // with this kick) and once for good (mobilenet_v2, 3 workers, streams): the driver can sit in the
  // queue with no event coming while the thread in line is the one whose move the peers wait for.
  void Yield(gpr_timespec deadline) {
    int64_t left_ms = gpr_time_to_millis(gpr_time_sub(deadline, gpr_now(GPR_CLOCK_MONOTONIC)));
    auto left = std::chrono::microseconds(std::max<int64_t>(0, left_ms) * 1000);
    Take(std::chrono::steady_clock::now() + std::min(kYieldKick, left), true);
  }

  // Drive the queue until done() or the deadline: kOk, kTick (deadline passed) or kFail (queue shut down).
  template <class F>
  int Drive(F done, gpr_timespec deadline) {
    while (!done()) {
      if (entering_.load(std::memory_order_relaxed)) {  // a caller from outside waits: let it in first
        Yield(deadline);
        continue;
      }
      void* tag;
      bool ok;
      switch (cq_->AsyncNext(&tag, &ok, deadline)) {
        case grpc::CompletionQueue::GOT_EVENT:
          static_cast<Op*>(tag)->Done(ok);
          break;
        case grpc::CompletionQueue::TIMEOUT:
          return done() ? kOk : kTick;
        default:
          return kFail;
      }
      // one event per turn, but not after the event this driver waited for: a waiting thread given the
      // queue may wait on this caller's next move, and this caller would wait to get the queue back
      // until that thread's deadline (--rpc tf stalled 0.5 s per budget so)
      if (!done() && waiting_.load(std::memory_order_relaxed)) Yield(deadline);
    }
    return kOk;
  }

  int Fail(const std::string& why) {
    error_ = why;
    return kFail;
  }

  Link* link(int peer) {
    auto it = links_.find(peer);
    return it == links_.end() ? nullptr : it->second.get();
  }

  int Connect(int peer, const std::string& target, bool stream) {
    Link* l = link(peer);
    if (!l) return Fail("is not a peer of this rank");
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(max_receive_);
    args.SetMaxSendMessageSize(-1);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own per link
    l->channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    l->stub = std::make_unique<grpc::GenericStub>(l->channel);
    std::string base = "/cb" + token_ + "/";
    l->deliver = base + kKindNames[stream ? kDeliverStream : kDeliver] + std::to_string(rank_);
    l->exchange = base + kKindNames[stream ? kExchangeStream : kExchange] + std::to_string(rank_);
    Leave();  // the idle driver answers peers meanwhile
    bool up = l->channel->WaitForConnected(After(timeout_));
    Enter();
    if (!up) return Fail("cannot be reached at " + target + " within " + Seconds(timeout_) + " s");
    if (!stream) return kOk;
    for (auto* s : {&l->dstream, &l->xstream}) {
      auto& ctx = s == &l->dstream ? l->dctx : l->xctx;
      ctx = std::make_unique<grpc::ClientContext>();
      *s = l->stub->PrepareCall(ctx.get(), s == &l->dstream ? l->deliver : l->exchange, cq_.get());
      l->started.Arm();
      (*s)->StartCall(&l->started);
      int rc = Drive([l] { return l->started.done; }, After(timeout_));
      if (rc != kOk || !l->started.ok) return Fail("did not accept a stream at " + target);
    }
    return kOk;
  }

  int Send(int peer, Msg* m) {
    Link* l = link(peer);
    if (!l->broken.empty()) return Fail(l->broken);
    if (l->dstream) {
      l->dwrite.Arm();
      l->dstream->Write(m->out, &l->dwrite);
      int rc = Drive([l] { return l->dwrite.done; }, After(timeout_));
      if (rc == kTick) return Cancel(l, "sending to");
      if (rc != kOk || !l->dwrite.ok) return Broken(l, "closed its stream while this rank sent to it (died or aborted)");
      return kOk;
    }
    // unary: the sequence number, then the caller's buffers (static slices, no copy); the call goes on
    // after this returns, once gRPC has written the request
    auto* u = new UnarySend;
    uint64_t seq = l->next_out++;
    std::vector<grpc::Slice> slices;
    slices.reserve(m->iov.size() + 1);
    slices.emplace_back(&seq, 8);  // copied: the one small copy
    for (const auto& [ptr, len] : m->iov)
      if (len) slices.emplace_back(ptr, len, grpc::Slice::STATIC_SLICE);
    grpc::ByteBuffer request(slices.data(), slices.size());
    u->ctx.set_deadline(After(timeout_));
    u->ctx.set_initial_metadata_corked(true);  // headers and message in one write, as a unary call sends them
    u->rpc = l->stub->PrepareCall(&u->ctx, l->deliver, cq_.get());
    for (Flag* f : {&u->wrote, &u->read, &u->finished}) f->Arm();
    u->rpc->StartCall(nullptr);  // corked: no operation of its own, so no completion (the write carries it)
    u->rpc->WriteLast(request, grpc::WriteOptions(), &u->wrote);
    u->rpc->Read(&u->reply, &u->read);
    u->rpc->Finish(&u->status, &u->finished);
    l->sends.push_back(u);
    Drive([u] { return u->written(); }, gpr_inf_future(GPR_CLOCK_MONOTONIC));  // the call's deadline ends it
    bool failed = !u->wrote.ok;  // the call is over: its status says why
    while (!l->sends.empty() && (failed || l->sends.front()->done() || l->sends.size() > kMaxInFlight)) {
      if (int rc = Reap(l); rc != kOk) return rc;
    }
    return kOk;
  }

  // Complete the oldest unary send.
  int Reap(Link* l) {
    UnarySend* u = l->sends.front();
    Drive([u] { return u->done(); }, gpr_inf_future(GPR_CLOCK_MONOTONIC));  // its deadline ends it
    l->sends.pop_front();
    grpc::Status st = u->status;
    delete u;
    if (!st.ok()) return Broken(l, StatusText(st, "sending to"));
    return kOk;
  }

  int Flush(int peer) {
    Link* l = link(peer);
    while (!l->sends.empty())
      if (int rc = Reap(l); rc != kOk) return rc;
    return kOk;
  }

  int Recv(int peer, Msg* m, double budget) {
    Link* l = link(peer);
    int rc = Drive([l] { return l->inbox.count(l->next_in) || l->in_closed || !l->broken.empty(); },
                   After(budget));
    if (rc != kOk) return rc;
    auto it = l->inbox.find(l->next_in);
    if (it == l->inbox.end()) return Fail(l->broken.empty() ? Lost() : l->broken);
    bool fits = Scatter(it->second.first, it->second.second, m, &scratch_);
    l->inbox.erase(it);
    ++l->next_in;
    if (!fits) return Fail("is named as the sender of a message that does not fit the " + std::to_string(m->nbytes) +
                           " B expected: do all ranks run the same command? (else a caller that is not this peer "
                           "sent it: tampering)");
    return kOk;
  }

  int Call(int peer, Msg* req, Msg* rep) {
    Link* l = link(peer);
    if (!l->broken.empty()) return Fail(l->broken);
    if (l->xstream) {
      l->xwrite.Arm();
      l->xread.Arm();
      l->xstream->Write(req->out, &l->xwrite);
      l->xstream->Read(&l->xreply, &l->xread);
      int rc = Drive([l] { return l->xwrite.done && l->xread.done; }, After(timeout_));
      if (rc == kTick) return Cancel(l, "calling");
      if (rc != kOk || !l->xwrite.ok || !l->xread.ok) return Broken(l, "closed its stream while this rank called it (died or aborted)");
      return Fits(l, l->xreply, rep);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(After(timeout_));
    grpc::ByteBuffer reply;
    grpc::Status st;
    Flag f;
    f.Arm();
    auto rpc = l->stub->PrepareUnaryCall(&ctx, l->exchange, req->out, cq_.get());
    rpc->StartCall();
    rpc->Finish(&reply, &st, &f);
    Drive([&f] { return f.done; }, gpr_inf_future(GPR_CLOCK_MONOTONIC));  // the call's deadline ends it
    if (!st.ok()) return Fail(StatusText(st, "calling"));
    return Fits(l, reply, rep);
  }

  // n unary calls in flight together (as TensorFlow issues a step's RecvTensor calls): reqs[i] to
  // peers[i], its reply into reps[i]; returns when every one has finished (each has the deadline).
  // A failure names its peer in *failed.
  int CallMany(int n, const int* peers, Msg* const* reqs, Msg* const* reps, int* failed) {
    struct One {
      grpc::ClientContext ctx;
      grpc::ByteBuffer reply;
      grpc::Status st;
      Flag f;
      std::unique_ptr<grpc::GenericClientAsyncResponseReader> rpc;
    };
    for (int i = 0; i < n; ++i) {  // before any starts: a started call must finish before its context goes
      Link* l = link(peers[i]);
      if (!l->broken.empty()) return *failed = peers[i], Fail(l->broken);
    }
    std::vector<std::unique_ptr<One>> calls;
    calls.reserve(n);
    int open = n;
    for (int i = 0; i < n; ++i) {
      Link* l = link(peers[i]);
      auto c = std::make_unique<One>();
      c->ctx.set_deadline(After(timeout_));
      c->f.Arm();
      c->rpc = l->stub->PrepareUnaryCall(&c->ctx, l->exchange, reqs[i]->out, cq_.get());
      c->rpc->StartCall();
      c->rpc->Finish(&c->reply, &c->st, &c->f);
      calls.push_back(std::move(c));
    }
    size_t next = 0;  // calls before it have finished: each wait looks on from there
    Drive([&] {
      while (next < calls.size() && calls[next]->f.done) ++next, --open;
      return open == 0;
    }, gpr_inf_future(GPR_CLOCK_MONOTONIC));  // every call's deadline ends it
    for (int i = 0; i < n; ++i) {
      if (!calls[i]->st.ok()) return *failed = peers[i], Fail(StatusText(calls[i]->st, "calling"));
      if (Fits(link(peers[i]), calls[i]->reply, reps[i]) != kOk) return *failed = peers[i], kFail;
    }
    return kOk;
  }

  // Wait for the next request from peer and copy it into req; it stays current until ServeReply.
  int ServeNext(int peer, Msg* req, double budget) {
    Link* l = link(peer);
    int rc = Drive([l] { return !l->exchanges.empty() || l->ex_closed || !l->broken.empty(); }, After(budget));
    if (rc != kOk) return rc;
    if (l->exchanges.empty()) return Fail(l->broken.empty() ? Lost() : l->broken);
    l->current = l->exchanges.front();
    l->exchanges.pop_front();
    if (!Scatter(ServerBuf(l->current), 0, req, &scratch_))
      return Fail("is named as the sender of a request that does not fit the " + std::to_string(req->nbytes) +
                  " B expected: do all ranks run the same command? (else a caller that is not this peer sent it: "
                  "tampering)");
    return kOk;
  }

  int ServeReply(int peer, Msg* rep);  // below ServerCall

  // Answer up to n calls with a fixed reply; *done counts them; kTick if none came within budget.
  int ServeFixed(int peer, int n, Msg* req, Msg* rep, int* done, double budget) {
    while (*done < n) {
      if (int rc = ServeNext(peer, req, budget); rc != kOk) return rc;
      if (int rc = ServeReply(peer, rep); rc != kOk) return rc;
      ++*done;
    }
    return kOk;
  }

  void Close();
  void Accept();
  bool Route(ServerCall* c);
  static grpc::ByteBuffer& ServerBuf(ServerCall* c);

  static std::string Seconds(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", s);
    return b;
  }
  static std::string Lost() { return "closed its connection (the process died or aborted)"; }
  // Why a one-way message numbered seq cannot be this link's peer's, or "" if it can be.
  static std::string OutOfSequence(const Link* l, uint64_t seq) {
    if (seq == UINT64_MAX) return "without a sequence number";
    if (seq < l->next_in || l->inbox.count(seq)) return "numbered " + std::to_string(seq) + ", a number already received";
    if (seq - l->in_order >= kAhead)
      return "numbered " + std::to_string(seq) + ", more than " + std::to_string(kAhead) + " past the " +
             std::to_string(l->in_order) + " received in order";
    return "";
  }
  // The link broken by a call its peer never makes (Python's grpcio transport says it alike).
  static void Tampered(Link* l, const std::string& what) {
    if (l->broken.empty())
      l->broken = "is named as the sender of " + what + "; it never sends that, so a caller who learnt this run's "
                  "gRPC method names sent it (tampering: the run's gRPC traffic is plain, so run it on a network "
                  "only the job reaches)";
  }
  int Broken(Link* l, const std::string& what) {
    l->broken = what;
    return Fail(l->broken);
  }
  std::string StatusText(const grpc::Status& st, const char* doing) {
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
      return "did not answer within " + Seconds(timeout_) + " s of this rank " + doing + " it (hung or too slow; "
             "see --timeout)";
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE)
      return std::string("is unreachable (the process died or aborted), found while ") + doing + " it";
    return "failed a call: gRPC error " + std::to_string(st.error_code()) + " " + doing + " it: " + st.error_message();
  }
  int Cancel(Link* l, const char* doing) {  // a stream op outlived the timeout: cancel, collect, fail
    if (l->dctx) l->dctx->TryCancel();
    if (l->xctx) l->xctx->TryCancel();
    Drive([l] { return l->dwrite.done && l->xwrite.done && l->xread.done; }, After(5));
    l->broken = "did not answer within " + Seconds(timeout_) + " s of this rank " + doing + " it (hung or too slow; "
                "see --timeout)";
    return Fail(l->broken);
  }
  int Fits(Link* l, const grpc::ByteBuffer& bb, Msg* m) {
    if (Scatter(bb, 0, m, &scratch_)) return kOk;
    return Fail("replied with a message that does not fit the " + std::to_string(m->nbytes) + " B expected");
  }

  std::string token_;
  int rank_;
  double timeout_;
  int max_receive_;  // bytes: the run's largest message and a margin; gRPC refuses a larger one
  int port_ = 0;
  std::string error_;
  grpc::AsyncGenericService service_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::unique_ptr<grpc::Server> server_;
  std::map<int, std::unique_ptr<Link>> links_;
  std::vector<grpc::Slice> scratch_;
  grpc::ByteBuffer empty_;
  bool closing_ = false;

 private:
  struct Kick final : Op {
    explicit Kick(Engine* e) : e(e) {}
    Engine* e;
    void Done(bool) override {
      std::lock_guard<std::mutex> l(e->m_);
      e->kick_pending_ = false;
    }
  };
  void IdleLoop();

  // Take the queue (the caller holds it until Leave), in turn: first come, first served. A yielding
  // driver hands it to the first in line and queues behind everyone waiting; the current driver is
  // kicked when kick_at has passed (at once for a caller from outside).
  void Take(std::chrono::steady_clock::time_point kick_at, bool yielding) {
    std::unique_lock<std::mutex> l(m_);
    if (yielding) {
      if (line_.empty()) return;  // nobody to hand over to: keep driving
      driving_ = false;
    }
    uint64_t me = next_ticket_++;
    line_.push_back(me);
    ++waiting_;
    if (!yielding) ++entering_;
    if (yielding) cv_.notify_all();
    auto free = [&] { return !driving_ && line_.front() == me; };
    if (!cv_.wait_until(l, kick_at, free)) {
      if (driving_ && !kick_pending_) {
        kick_pending_ = true;
        kick_.Set(cq_.get(), gpr_now(GPR_CLOCK_MONOTONIC), &kick_op_);
      }
      cv_.wait(l, free);
    }
    line_.pop_front();
    --waiting_;
    if (!yielding) --entering_;
    driving_ = true;
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<uint64_t> line_;     // tickets of the threads waiting to drive, in arrival order
  uint64_t next_ticket_ = 0;
  std::atomic<int> waiting_{0};   // threads waiting to drive
  std::atomic<int> entering_{0};  // of them, callers from outside (not drivers taking turns)
  bool driving_ = false, idle_waits_ = false, kick_pending_ = false, stop_ = false;
  std::chrono::steady_clock::time_point left_at_ = std::chrono::steady_clock::now();
  grpc::Alarm kick_;
  Kick kick_op_{this};
  std::thread idle_;
};

// One incoming call on this rank's server, a state machine on its own tag (one op outstanding at a time).
struct ServerCall final : Op {
  explicit ServerCall(Engine* e) : e(e), rw(&ctx) {}
  Engine* e;
  grpc::GenericServerContext ctx;
  grpc::GenericServerAsyncReaderWriter rw;
  grpc::ByteBuffer buf;
  Link* link = nullptr;
  Kind kind = kDeliver;
  enum { kNew, kRead, kReply, kFinish } state = kNew;

  void Done(bool ok) override {
    if (e->closing_) {  // shutting down: no new ops; this was the only one outstanding
      if (state == kReply && link) ++link->replies_done;
      delete this;
      return;
    }
    switch (state) {
      case kNew:
        if (!ok) {
          delete this;
          return;
        }
        e->Accept();
        if (!e->Route(this)) {
          state = kFinish;
          rw.Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "not a method of this run"), this);
          return;
        }
        if (kind == kDeliverStream || kind == kExchangeStream) {
          bool& seen = kind == kDeliverStream ? link->dstream_seen : link->xstream_seen;
          if (seen) {
            Engine::Tampered(link, std::string("a second ") + kKindNames[kind] + " call");
            state = kFinish;
            rw.Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "out of this link's sequence"), this);
            return;
          }
          seen = true;
        }
        state = kRead;
        rw.Read(&buf, this);
        return;
      case kRead:
        if (!ok) {  // the client half-closed or went away
          if (kind == kDeliverStream) link->in_closed = true;
          if (kind == kExchangeStream) link->ex_closed = true;
          state = kFinish;
          rw.Finish(grpc::Status::OK, this);
          return;
        }
        if (kind == kDeliverStream) {
          link->inbox.emplace(link->stream_in++, std::make_pair(std::move(buf), size_t{0}));
          buf = grpc::ByteBuffer();
          rw.Read(&buf, this);
        } else if (kind == kDeliver) {
          uint64_t seq = SeqOf(buf, &e->scratch_);
          std::string why = Engine::OutOfSequence(link, seq);
          state = kFinish;
          if (!why.empty()) {
            Engine::Tampered(link, "a one-way message " + why);
            buf = grpc::ByteBuffer();
            rw.Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "out of this link's sequence"), this);
            return;
          }
          link->inbox.emplace(seq, std::make_pair(std::move(buf), size_t{8}));
          while (link->inbox.count(link->in_order)) ++link->in_order;
          buf = grpc::ByteBuffer();
          rw.WriteAndFinish(e->empty_, grpc::WriteOptions(), grpc::Status::OK, this);
        } else {
          link->exchanges.push_back(this);  // serve() answers it
        }
        return;
      case kReply:
        ++link->replies_done;
        if (!ok) link->broken = "went away before this rank's reply was sent";
        if (kind == kExchangeStream && ok) {
          state = kRead;
          rw.Read(&buf, this);
          return;
        }
        delete this;
        return;
      case kFinish:
        delete this;
        return;
    }
  }

  void Reply(const grpc::ByteBuffer& out) {
    state = kReply;
    ++link->replies_posted;
    if (kind == kExchangeStream)
      rw.Write(out, this);
    else
      rw.WriteAndFinish(out, grpc::WriteOptions(), grpc::Status::OK, this);
  }
};

grpc::ByteBuffer& Engine::ServerBuf(ServerCall* c) { return c->buf; }

void Engine::Accept() {
  auto* c = new ServerCall(this);
  service_.RequestCall(&c->ctx, &c->rw, cq_.get(), cq_.get(), c);
}

bool Engine::Route(ServerCall* c) {
  const std::string& m = c->ctx.method();
  std::string base = "/cb" + token_ + "/";
  if (m.compare(0, base.size(), base) != 0) return false;
  for (int k = kExchangeStream; k >= kDeliver; --k) {  // longest names first
    std::string name = kKindNames[k];
    if (m.compare(base.size(), name.size(), name) != 0) continue;
    std::string rest = m.substr(base.size() + name.size());
    if (rest.empty() || rest.find_first_not_of("0123456789") != std::string::npos || rest.size() > 9) return false;
    Link* l = link(std::stoi(rest));
    if (!l) return false;
    c->link = l;
    c->kind = static_cast<Kind>(k);
    return true;
  }
  return false;
}

int Engine::ServeReply(int peer, Msg* rep) {
  Link* l = link(peer);
  ServerCall* c = l->current;
  if (!c) return Fail("has no request waiting for a reply");
  l->current = nullptr;
  c->Reply(rep->out);
  int rc = Drive([l] { return l->replies_done == l->replies_posted; }, After(timeout_));
  if (rc == kTick) return Fail("did not take this rank's reply within " + Seconds(timeout_) + " s (hung or too slow; "
                               "see --timeout)");
  if (rc != kOk) return rc;
  return l->broken.empty() ? kOk : Fail(l->broken);
}

void Engine::IdleLoop() {
  std::unique_lock<std::mutex> l(m_);
  while (!stop_) {
    if (driving_ || waiting_.load()) {
      idle_waits_ = true;
      cv_.wait(l);
      idle_waits_ = false;
      continue;
    }
    auto idle_for = std::chrono::steady_clock::now() - left_at_;
    if (idle_for < kIdleAfter) {
      cv_.wait_for(l, kIdleAfter - idle_for);
      continue;
    }
    driving_ = true;
    l.unlock();
    void* tag;
    bool ok;
    auto st = cq_->AsyncNext(&tag, &ok, After(0.2));
    if (st == grpc::CompletionQueue::GOT_EVENT) static_cast<Op*>(tag)->Done(ok);
    l.lock();
    driving_ = false;
    cv_.notify_all();
    if (st == grpc::CompletionQueue::SHUTDOWN) break;
  }
}

void Engine::Close() {
  Enter();
  {
    std::lock_guard<std::mutex> g(m_);
    stop_ = true;
    cv_.notify_all();
  }
  Leave();
  if (idle_.joinable()) idle_.join();
  for (auto& [p, l] : links_) {
    while (!l->sends.empty()) Reap(l.get());
    if (l->dctx) l->dctx->TryCancel();
    if (l->xctx) l->xctx->TryCancel();
    Drive([&] { return l->dwrite.done && l->xwrite.done && l->xread.done && l->started.done; }, After(2));
  }
  closing_ = true;
  if (server_) server_->Shutdown(After(1));
  cq_->Shutdown();
  void* tag;
  bool ok;
  while (cq_->Next(&tag, &ok)) static_cast<Op*>(tag)->Done(ok);
  for (auto& [p, l] : links_) {
    for (ServerCall* c : l->exchanges) delete c;
    delete l->current;
    l->exchanges.clear();
    l->current = nullptr;
  }
}

// Scoped Enter/Leave for the C entry points.
struct Held {
  explicit Held(Engine* e) : e(e) { e->Enter(); }
  ~Held() { e->Leave(); }
  Engine* e;
};

}  // namespace

extern "C" {

// Start this rank's server on host:port (0: any free port) for the given peers; NULL with *err set if not.
void* cbg_new(const char* host, int port, const char* token, int rank, const int* peers, int npeers,
              double timeout, int max_receive, char* err, int errlen) {
  auto* e = new Engine(token, rank, timeout, max_receive);
  if (!e->Start(host, port, std::vector<int>(peers, peers + npeers))) {
    std::snprintf(err, errlen, "%s", e->error());
    delete e;
    return nullptr;
  }
  return e;
}

int cbg_port(void* e) { return static_cast<Engine*>(e)->port(); }
const char* cbg_error(void* e) { return static_cast<Engine*>(e)->error(); }

int cbg_connect(void* e, int peer, const char* target, int stream) {
  Held h(static_cast<Engine*>(e));
  return h.e->Connect(peer, target, stream != 0);
}

// A message over n caller-owned buffers (they must outlive it).
void* cbg_msg(int n, char* const* ptrs, const uint64_t* lens) {
  auto* m = new Msg;
  std::vector<grpc::Slice> slices;
  for (int i = 0; i < n; ++i) {
    m->iov.emplace_back(ptrs[i], lens[i]);
    m->nbytes += lens[i];
    if (lens[i]) slices.emplace_back(ptrs[i], lens[i], grpc::Slice::STATIC_SLICE);
  }
  if (slices.empty()) slices.emplace_back();  // an empty message is one empty slice
  m->out = grpc::ByteBuffer(slices.data(), slices.size());
  return m;
}

void cbg_msg_free(void* m) { delete static_cast<Msg*>(m); }

int cbg_send(void* e, int peer, void* m) {
  Held h(static_cast<Engine*>(e));
  return h.e->Send(peer, static_cast<Msg*>(m));
}

int cbg_flush(void* e, int peer) {
  Held h(static_cast<Engine*>(e));
  return h.e->Flush(peer);
}

int cbg_recv(void* e, int peer, void* m, double budget) {
  Held h(static_cast<Engine*>(e));
  return h.e->Recv(peer, static_cast<Msg*>(m), budget);
}

int cbg_call(void* e, int peer, void* req, void* rep) {
  Held h(static_cast<Engine*>(e));
  return h.e->Call(peer, static_cast<Msg*>(req), static_cast<Msg*>(rep));
}

int cbg_call_many(void* e, int n, const int* peers, void* const* reqs, void* const* reps, int* failed) {
  Held h(static_cast<Engine*>(e));
  return h.e->CallMany(n, peers, reinterpret_cast<Msg* const*>(reqs), reinterpret_cast<Msg* const*>(reps), failed);
}

int cbg_serve_next(void* e, int peer, void* req, double budget) {
  Held h(static_cast<Engine*>(e));
  return h.e->ServeNext(peer, static_cast<Msg*>(req), budget);
}

int cbg_serve_reply(void* e, int peer, void* rep) {
  Held h(static_cast<Engine*>(e));
  return h.e->ServeReply(peer, static_cast<Msg*>(rep));
}

int cbg_serve_fixed(void* e, int peer, int n, void* req, void* rep, int* done, double budget) {
  Held h(static_cast<Engine*>(e));
  return h.e->ServeFixed(peer, n, static_cast<Msg*>(req), static_cast<Msg*>(rep), done, budget);
}

void cbg_close(void* e) {
  auto* engine = static_cast<Engine*>(e);
  engine->Close();
  delete engine;
}

}  // extern "C"
