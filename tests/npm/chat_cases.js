// Conversations rendered through every chat template, each with
// add_generation_prompt true/false and enable_thinking unset/true/false.
'use strict';

const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather for a city. 获取天气。',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', description: 'City name, e.g. "Paris"' },
        days: { type: 'integer', description: 'Forecast days' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      },
      required: ['city'],
    },
  },
};
const SEARCH_TOOL = {
  type: 'function',
  function: {
    name: 'web_search',
    description: 'Search the web.',
    parameters: { type: 'object', properties: { query: { type: 'string' }, top_k: { type: 'integer' } }, required: ['query'] },
  },
};

// Tool calls come in two shapes: arguments as an object (GLM, Qwen3,
// DeepSeek-V3.2 templates) and as a JSON string (DeepSeek-V3/V3.1).
function call(name, args, asString) {
  return { type: 'function', function: { name, arguments: asString ? JSON.stringify(args) : args } };
}

function conversations(asString) {
  const sfx = asString ? '_strargs' : '_objargs';
  const c = (name, messages, tools) => ({ name: name + (name.startsWith('tool') ? sfx : ''), messages, tools });
  return [
    c('user_only', [{ role: 'user', content: 'Hello!' }]),
    c('system_user', [{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: 'What is 2+2?' }]),
    c('multi_turn', [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello! How can I help?' },
      { role: 'user', content: 'Tell me a joke.' },
    ]),
    c('multi_turn_ends_assistant', [
      { role: 'user', content: 'Capital of France?' },
      { role: 'assistant', content: 'Paris.' },
    ]),
    c('think_in_content', [
      { role: 'user', content: 'What is 3*7?' },
      { role: 'assistant', content: '<think>\n3 times 7 is 21.\n</think>\n\n21' },
      { role: 'user', content: 'And 4*8?' },
    ]),
    c('think_last_turn', [
      { role: 'user', content: 'Solve x+1=3' },
      { role: 'assistant', content: '<think>subtract 1</think>x = 2' },
    ]),
    c('reasoning_content_field', [
      { role: 'user', content: 'Why is the sky blue?' },
      { role: 'assistant', content: 'Rayleigh scattering.', reasoning_content: 'Short wavelengths scatter more.' },
    ]),
    c('unicode', [
      { role: 'system', content: '你是一个乐于助人的助手。' },
      { role: 'user', content: '你好 👋🏽! Ça va? 日本語 «ok» "quotes" \'single\' \\ backslash' },
      { role: 'assistant', content: '很好 😀\n\n- item 1\n- item 2' },
      { role: 'user', content: 'Tabs\tand\nnewlines\r\n  and   spaces  ' },
    ]),
    c('whitespace_content', [{ role: 'user', content: '  \n leading and trailing \n\n ' }]),
    c('empty_content', [{ role: 'user', content: '' }]),
    c('special_in_content', [{ role: 'user', content: '<|user|> <|im_start|> <｜User｜> {{ not a template }} {% raw %}' }]),
    c('two_system', [
      { role: 'system', content: 'Rule one.' },
      { role: 'system', content: 'Rule two.' },
      { role: 'user', content: 'ok' },
    ]),
    c('long_history', Array.from({ length: 12 }, (_, i) => ({
      role: i % 2 === 0 ? 'user' : 'assistant',
      content: (i % 2 === 0 ? 'Question ' : 'Answer ') + i + ' ' + 'lorem ipsum '.repeat(i),
    }))),
    c('tools_user', [{ role: 'user', content: "What's the weather in Paris?" }], [WEATHER_TOOL, SEARCH_TOOL]),
    c('tools_system_user', [
      { role: 'system', content: 'You can use tools.' },
      { role: 'user', content: 'Weather in 北京?' },
    ], [WEATHER_TOOL]),
    c('tool_call_roundtrip', [
      { role: 'system', content: 'Use tools when needed.' },
      { role: 'user', content: "What's the weather in Paris and Tokyo?" },
      { role: 'assistant', content: null, tool_calls: [call('get_weather', { city: 'Paris', days: 2 }, asString),
                                                      call('get_weather', { city: 'Tokyo', unit: 'celsius' }, asString)] },
      { role: 'tool', content: '{"temp": 18, "sky": "clear"}' },
      { role: 'tool', content: '{"temp": 25, "sky": "rain"}' },
      { role: 'assistant', content: 'Paris is 18°C and clear; Tokyo is 25°C with rain.' },
      { role: 'user', content: 'Thanks!' },
    ], [WEATHER_TOOL]),
    c('tool_call_pending', [
      { role: 'user', content: 'Search for spar runtime' },
      { role: 'assistant', content: null, tool_calls: [call('web_search', { query: 'spar "runtime" 稀疏', top_k: 3 }, asString)] },
      { role: 'tool', content: 'result: nothing found' },
    ], [SEARCH_TOOL]),
    c('tool_call_nested_args', [
      { role: 'user', content: 'Run it' },
      { role: 'assistant', content: null, tool_calls: [call('web_search', { query: 'x', top_k: 1, filters: { lang: ['en', 'zh'], safe: true, score: 0.5 } }, asString)] },
      { role: 'tool', content: 'ok' },
      { role: 'assistant', content: 'Done.' },
    ], [SEARCH_TOOL]),
  ];
}

// Conversations only some templates understand.
function specialConversations() {
  return [
    {
      name: 'content_parts',
      only: ['glm5', 'glm45', 'glm5x_patched'],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Part one. ' }, { type: 'text', text: 'Part two.' }] },
      ],
    },
    {
      name: 'reasoning_effort_low',
      only: ['glm5x_patched'],
      extra: { reasoning_effort: 'low', clear_thinking: true },
      messages: [
        { role: 'user', content: 'Q1' },
        { role: 'assistant', content: '<think>t1</think>A1' },
        { role: 'user', content: 'Q2' },
        { role: 'assistant', content: '<think>t2</think>A2' },
      ],
    },
    {
      name: 'developer_role',
      only: ['deepseek_v32'],
      messages: [{ role: 'developer', content: 'Act as a tester.' }, { role: 'user', content: 'Go' }],
      tools: [WEATHER_TOOL],
    },
    {
      name: 'prefix_assistant',
      only: ['deepseek_v31'],
      messages: [{ role: 'user', content: 'Continue:' }, { role: 'assistant', content: 'Once upon', prefix: true }],
    },
  ];
}

// Template options as a chat request sends them (chat_template_kwargs and
// the top-level reasoning_effort): each case keeps the request fields, and
// its context is what vLLM would render — reasoning_effort first, then the
// kwargs over it; unknown kwargs are just more variables the template
// ignores. The HTTP layer's parity test (tests/services/
// template_kwargs_parity_test.cc) sends the request through spar's OpenAI
// request parser and compares the prompt with this render.
function templateOptionCases(templateNames) {
  const history = [
    { role: 'user', content: 'Q1' },
    { role: 'assistant', content: 'A1', reasoning_content: 'thought one' },
    { role: 'user', content: 'Q2' },
    { role: 'assistant', content: 'A2', reasoning_content: 'thought two' },
    { role: 'user', content: 'Q3' },
  ];
  const requests = [
    { chat_template_kwargs: { enable_thinking: false } },
    { chat_template_kwargs: { enable_thinking: true, clear_thinking: false } },
    { chat_template_kwargs: { clear_thinking: true } },
    { reasoning_effort: 'low' },
    { reasoning_effort: 'high', chat_template_kwargs: { enable_thinking: true } },
    { reasoning_effort: 'medium' },
    { reasoning_effort: 'low', chat_template_kwargs: { reasoning_effort: 'high' } },
    { chat_template_kwargs: { frobnicate: 1, nested: { a: [1, 'x'] } } },
    { chat_template_kwargs: { enable_thinking: false, clear_thinking: false, unknown: null } },
  ];
  const cases = [];
  for (const tpl of templateNames.filter((t) => t === 'glm5' || t === 'glm5x_patched')) {
    for (const [i, req] of requests.entries()) {
      for (const tools of [undefined, [WEATHER_TOOL]]) {
        const request = { messages: history, ...req };
        if (tools) request.tools = tools;
        const ctx = { messages: history, add_generation_prompt: true, bos_token: '', eos_token: '' };
        if (tools) ctx.tools = tools;
        if (req.reasoning_effort !== undefined) ctx.reasoning_effort = req.reasoning_effort;
        Object.assign(ctx, req.chat_template_kwargs || {});
        cases.push({ template: tpl, name: `template_options_${i}/tools=${!!tools}`, context: ctx, request });
      }
    }
  }
  return cases;
}

function buildChatCases(templateNames) {
  const cases = [];
  const stringArgTemplates = new Set(['deepseek_v3', 'deepseek_v31']);
  for (const tpl of templateNames) {
    const convs = conversations(stringArgTemplates.has(tpl)).concat(
      specialConversations().filter((s) => s.only.includes(tpl)));
    for (const conv of convs) {
      for (const agp of [true, false]) {
        for (const thinking of [undefined, true, false]) {
          const ctx = {
            messages: conv.messages,
            add_generation_prompt: agp,
            bos_token: '<｜begin▁of▁sentence｜>',
            eos_token: '<｜end▁of▁sentence｜>',
          };
          if (conv.tools) ctx.tools = conv.tools;
          if (thinking !== undefined) ctx.enable_thinking = thinking;
          if (conv.extra) Object.assign(ctx, conv.extra);
          cases.push({ template: tpl, name: `${conv.name}/agp=${agp}/thinking=${thinking}`, context: ctx });
        }
      }
    }
  }
  return cases.concat(templateOptionCases(templateNames));
}

module.exports = { buildChatCases };
