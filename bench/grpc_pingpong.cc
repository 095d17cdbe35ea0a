// A C++ gRPC ping-pong: the reference bench/vs_grpc_cpp.py measures commbench's grpc transport against.
//
//   grpc_pingpong server PORT [copy]
//   grpc_pingpong client HOST:PORT unary|stream SIZE ITERATIONS WARMUP [copy]
//
// Generic (raw bytes, no protobuf) methods through gRPC's async completion-queue API, as TensorFlow's
// runtime uses it: /cb.Ref/Unary answers each call with a message of the same size; /cb.Ref/Stream
// echoes every message of a bidi stream. The client times every round trip and prints one line:
// "size p50_one_way_us mean_one_way_us" (one way = round trip / 2). With "copy", each side also copies
// every message it receives out of gRPC's slices into a buffer of its own, and the server answers from a
// second buffer of its own instead of echoing gRPC's slices: an application that receives into and sends
// from its own memory (osu_latency's r_buf and s_buf; commbench's transports receive into the caller's
// buffers and send from them).
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

grpc::ByteBuffer Payload(size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + 7) & 0xff);  // touched
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

void* Tag(int i) { return reinterpret_cast<void*>(static_cast<intptr_t>(i)); }

bool g_copy = false;  // copy each received message into the application's own buffer
std::vector<char> g_app, g_send;  // the server's receive and send buffers (one thread serves every call)

void CopyOut(const grpc::ByteBuffer& buf, std::vector<char>* app) {
  if (!g_copy) return;
  std::vector<grpc::Slice> slices;
  buf.Dump(&slices);
  app->resize(buf.Length());
  size_t off = 0;
  for (const grpc::Slice& s : slices) {
    std::memcpy(app->data() + off, s.begin(), s.size());
    off += s.size();
  }
}

// One call on the server: read, write back, until the client is done (a unary call is one round).
class Call {
 public:
  Call(grpc::AsyncGenericService* service, grpc::ServerCompletionQueue* cq) : stream_(&ctx_), cq_(cq) {
    service->RequestCall(&ctx_, &stream_, cq_, cq_, this);
  }
  // Returns false when this call is over (delete it).
  bool Step(bool ok, grpc::AsyncGenericService* service) {
    switch (state_) {
      case kNew:
        if (!ok) return false;
        new Call(service, cq_);  // the next incoming call
        state_ = kRead;
        stream_.Read(&buf_, this);
        return true;
      case kRead:
        if (!ok) {  // the client half-closed
          state_ = kDone;
          stream_.Finish(grpc::Status::OK, this);
          return true;
        }
        CopyOut(buf_, &g_app);
        if (g_copy) Answer();  // reply from the application's own send buffer
        if (ctx_.method() == "/cb.Ref/Unary") {  // one round: reply and finish in one batch
          state_ = kDone;
          stream_.WriteAndFinish(buf_, grpc::WriteOptions(), grpc::Status::OK, this);
          return true;
        }
        state_ = kWrote;
        stream_.Write(buf_, this);
        return true;
      case kWrote:
        if (!ok) return false;
        state_ = kRead;
        stream_.Read(&buf_, this);
        return true;
      default:
        return false;
    }
  }

 private:
  enum State { kNew, kRead, kWrote, kDone };
  grpc::GenericServerContext ctx_;
  grpc::GenericServerAsyncReaderWriter stream_;
  grpc::ServerCompletionQueue* cq_;
  // buf_ becomes a message of the request's size over the server's own send buffer
  void Answer() {
    size_t size = buf_.Length();
    if (g_send.size() != size) {
      g_send.resize(size);
      for (size_t i = 0; i < size; ++i) g_send[i] = static_cast<char>((i * 131 + 7) & 0xff);  // touched
    }
    grpc::Slice slice(g_send.data(), size, grpc::Slice::STATIC_SLICE);
    buf_ = grpc::ByteBuffer(&slice, 1);
  }
  grpc::ByteBuffer buf_;
  State state_ = kNew;
};

int Serve(const std::string& port) {
  grpc::AsyncGenericService service;
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.AddListeningPort("127.0.0.1:" + port, grpc::InsecureServerCredentials());
  builder.RegisterAsyncGenericService(&service);
  std::unique_ptr<grpc::ServerCompletionQueue> cq = builder.AddCompletionQueue();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    std::fprintf(stderr, "grpc_pingpong: cannot listen on port %s\n", port.c_str());
    return 2;
  }
  std::printf("listening\n");
  std::fflush(stdout);
  new Call(&service, cq.get());
  void* tag;
  bool ok;
  while (cq->Next(&tag, &ok)) {
    auto* call = static_cast<Call*>(tag);
    if (!call->Step(ok, &service)) delete call;
  }
  return 0;
}

bool Wait(grpc::CompletionQueue* cq, void* want) {
  void* tag;
  bool ok;
  if (!cq->Next(&tag, &ok) || tag != want) {
    std::fprintf(stderr, "grpc_pingpong: completion queue out of step\n");
    std::exit(1);
  }
  return ok;
}

int Client(const std::string& target, const std::string& kind, size_t size, int iters, int warmup) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ByteBuffer request = Payload(size), reply;
  std::vector<char> app(size);
  std::vector<double> us;
  us.reserve(iters);
  using Clock = std::chrono::steady_clock;
  if (kind == "unary") {
    for (int i = 0; i < warmup + iters; ++i) {
      auto t0 = Clock::now();
      grpc::ClientContext ctx;
      grpc::Status status;
      auto call = stub.PrepareUnaryCall(&ctx, "/cb.Ref/Unary", request, &cq);
      call->StartCall();
      call->Finish(&reply, &status, Tag(1));
      Wait(&cq, Tag(1));
      if (!status.ok()) {
        std::fprintf(stderr, "grpc_pingpong: %s\n", status.error_message().c_str());
        return 1;
      }
      CopyOut(reply, &app);
      auto t1 = Clock::now();
      if (i >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
    }
  } else {
    grpc::ClientContext ctx;
    auto stream = stub.PrepareCall(&ctx, "/cb.Ref/Stream", &cq);
    stream->StartCall(Tag(1));
    Wait(&cq, Tag(1));
    for (int i = 0; i < warmup + iters; ++i) {
      auto t0 = Clock::now();
      stream->Write(request, Tag(2));
      Wait(&cq, Tag(2));
      stream->Read(&reply, Tag(3));
      if (!Wait(&cq, Tag(3))) {
        std::fprintf(stderr, "grpc_pingpong: the stream ended early\n");
        return 1;
      }
      CopyOut(reply, &app);
      auto t1 = Clock::now();
      if (i >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
    }
    stream->WritesDone(Tag(4));
    Wait(&cq, Tag(4));
    grpc::Status status;
    stream->Finish(&status, Tag(5));
    Wait(&cq, Tag(5));
  }
  if (reply.Length() != size) {
    std::fprintf(stderr, "grpc_pingpong: reply of %zu B, not %zu\n", reply.Length(), size);
    return 1;
  }
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double v : us) mean += v / us.size();
  std::printf("%zu %.3f %.3f\n", size, sorted[sorted.size() / 2], mean);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  g_copy = std::string(argv[argc - 1]) == "copy";
  if (g_copy) --argc;
  if (argc == 3 && std::string(argv[1]) == "server") return Serve(argv[2]);
  if (argc == 7 && std::string(argv[1]) == "client")
    return Client(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10), std::atoi(argv[5]), std::atoi(argv[6]));
  std::fprintf(stderr, "usage: grpc_pingpong server PORT [copy] | client HOST:PORT unary|stream SIZE ITERS WARMUP [copy]\n");
  return 2;
}
