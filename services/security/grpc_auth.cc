#include "services/security/grpc_auth.h"

#include <grpcpp/support/interceptor.h>

#include "absl/strings/str_cat.h"

namespace spar {
namespace {

class BearerInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(std::shared_ptr<const std::string> header) : header_(std::move(header)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  std::shared_ptr<const std::string> header_;
};

class BearerInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(const std::string& token)
      : header_(std::make_shared<const std::string>(absl::StrCat("Bearer ", token))) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new BearerInterceptor(header_);
  }

 private:
  std::shared_ptr<const std::string> header_;
};

}  // namespace

absl::Status CheckGrpcAuthorization(const ApiKeys& keys, const grpc::ServerContextBase& ctx) {
  if (!keys.enabled()) return absl::OkStatus();
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return keys.CheckAuthorization("");
  return keys.CheckAuthorization(absl::string_view(it->second.data(), it->second.size()));
}

std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> BearerTokenInterceptors(
    const std::string& token) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> out;
  if (!token.empty()) out.push_back(std::make_unique<BearerInterceptorFactory>(token));
  return out;
}

}  // namespace spar
