#include "launcher/api_server_control.h"

#include "launcher/spec/frames.h"

namespace vllm::launcher {

bool SendApiServerMessage(int fd, const ApiServerMessage& message) {
  return WriteFrame(fd, EncodeApiServerMessage(message));
}

absl::StatusOr<std::string> EncodeSpecFor(const ServeArgs& args, int32_t index, int32_t port,
                                          const DpCoordinatorAddresses& coordinator) {
  ApiServerSpec spec;
  spec.index = index;
  spec.count = args.api_server_count;
  spec.config = args.config;
  FrontendSettings& f = spec.frontend;
  f.host = args.host;
  f.port = port;
  f.http = args.http;
  f.max_connections = args.max_connections;
  f.shutdown_timeout_s = args.shutdown_timeout_s;
  f.served_model_names = args.served_model_names;
  f.chat_template = args.chat_template;
  f.multi_node = args.multi_node;
  f.dp_load_balancing = args.dp_load_balancing;
  f.cluster_key_file = args.cluster_key_file;
  spec.coordinator = coordinator;
  spec.serving = args.serving;
  return EncodeApiServerSpec(spec);
}

ServeArgs ServeArgsFromSpec(const ApiServerSpec& spec) {
  ServeArgs args;
  args.config = spec.config;
  const FrontendSettings& f = spec.frontend;
  args.host = f.host;
  args.port = f.port;
  args.http = f.http;
  args.max_connections = f.max_connections;
  args.shutdown_timeout_s = f.shutdown_timeout_s;
  args.served_model_names = f.served_model_names;
  args.chat_template = f.chat_template;
  args.multi_node = f.multi_node;
  args.dp_load_balancing = f.dp_load_balancing;
  args.cluster_key_file = f.cluster_key_file;
  args.api_server_count = spec.count;
  args.serving = spec.serving;
  return args;
}

}  // namespace vllm::launcher
