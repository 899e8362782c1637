// The gRPC API's chat input (spar.v1.ChatInput) -> the prompt text, rendered
// exactly as the OpenAI-compatible API renders /v1/chat/completions: the
// messages become the OpenAI JSON they mirror and go through the same
// normalization and rendering (services/http/chat_messages.h), so the same
// conversation is the same prompt, token for token, over either API.
//
// Errors are INVALID_ARGUMENT naming the proto field as the client spells
// it ("chat.messages[2].content_parts[0].type",
// "chat.tools[0].function.parameters_json"); no chat template is
// FAILED_PRECONDITION.
#ifndef SPAR_SERVICES_SCHEDULER_CHAT_INPUT_H_
#define SPAR_SERVICES_SCHEDULER_CHAT_INPUT_H_

#include <string>

#include "absl/status/statusor.h"
#include "spar/v1/generation.pb.h"
#include "text/chat_template.h"

namespace spar {

absl::StatusOr<std::string> RenderChatInput(const v1::ChatInput& chat, const ChatTemplate* chat_template);

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_CHAT_INPUT_H_
