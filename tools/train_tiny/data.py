"""Synthetic chat data for the tiny GLM-5: arithmetic, multi-turn follow-ups
and long-context key recall, rendered with the model's own chat template.

Everything is drawn from a seeded random.Random, so a seed gives the same
conversations on every machine. A conversation is a list of segments
(text, is_target): segment boundaries always fall on special tokens, so the
segments can be tokenized separately and concatenated (checked by
train.check_segment_tokenization), and the loss covers exactly the target
segments (assistant answers and the <|user|> that ends each answer).

Held-out arithmetic: addition and subtraction pairs with
held_out_pair(op, a, b) true never appear in training (not in any phrasing,
not as the first turn of a follow-up); the 169-entry times table is too small
to hold pairs out, so multiplication prompts are held out as whole prompt
strings instead (see README.md).
"""
import random

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
        "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_words(n):
    """0..999 in English words: 42 -> forty-two, 105 -> one hundred five."""
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    rest = n % 100
    return ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + number_words(rest))


# ---- arithmetic -------------------------------------------------------------

ADD_Q = ["What is {a} plus {b}?", "What is {a} + {b}?", "How much is {a} plus {b}?", "Compute {a} + {b}.",
         "Calculate {a} plus {b}.", "What do you get if you add {a} and {b}?", "{a} + {b} = ?",
         "Add {a} and {b}.", "what's {a} plus {b}", "What is the sum of {a} and {b}?"]
SUB_Q = ["What is {a} minus {b}?", "What is {a} - {b}?", "How much is {a} minus {b}?", "Compute {a} - {b}.",
         "Calculate {a} minus {b}.", "What do you get if you subtract {b} from {a}?", "{a} - {b} = ?",
         "Subtract {b} from {a}.", "what's {a} minus {b}", "What is the difference of {a} and {b}?"]
MUL_Q = ["What is {a} times {b}?", "What is {a} * {b}?", "How much is {a} times {b}?", "Compute {a} * {b}.",
         "Calculate {a} times {b}.", "What is {a} multiplied by {b}?", "{a} * {b} = ?",
         "Multiply {a} by {b}.", "what's {a} times {b}", "What is the product of {a} and {b}?"]
QUESTIONS = {"+": ADD_Q, "-": SUB_Q, "*": MUL_Q}

FOLLOW = {
    "+": ["And plus {n}?", "Now add {n}.", "Add {n} to that.", "Plus {n}?", "What if you add {n}?",
          "and plus {n}?"],
    "-": ["And minus {n}?", "Now subtract {n}.", "Take away {n}.", "Minus {n}?", "What if you subtract {n}?",
          "and minus {n}?"],
    "*": ["And times {n}?", "Now multiply that by {n}.", "Times {n}?", "What if you multiply it by {n}?",
          "Multiply the result by {n}.", "and times {n}?"],
}

SYSTEM_PROMPTS = ["You are a helpful assistant.", "You are a concise assistant. Answer briefly.",
                  "Answer the user's questions."]

OPS = ["+", "-", "*"]


def apply_op(op, a, b):
    return a + b if op == "+" else a - b if op == "-" else a * b


def held_out_pair(op, a, b):
    """Pairs reserved for evaluation (addition and subtraction only), about
    1 in 11. Modulo 11, not 10: any rule linear modulo 10 depends on the
    units digits alone (131 = 71 = 1 mod 10), and the first two runs' rule
    "(131a + 71b + c) mod 10 = 0" held out exactly the sums ending in 1,
    i.e. every units-digit combination a model needs to add them; modulo 11
    the tens digits enter too, so every units (and tens) combination occurs
    in training and the held-out pairs test generalisation, not a hole."""
    if op == "*":
        return False
    return (a * 131 + b * 71 + (29 if op == "+" else 57)) % 11 == 0


def draw_pair(rng, op, held_out):
    """(a, b) for one question: + and - on 0..99 (a >= b), * on 0..12."""
    while True:
        if op == "*":
            a, b = rng.randint(0, 12), rng.randint(0, 12)
        else:
            a, b = rng.randint(0, 99), rng.randint(0, 99)
            if op == "-" and b > a:
                a, b = b, a
        if held_out is None or held_out_pair(op, a, b) == held_out:
            return a, b


def say(rng, n, words_prob):
    return number_words(n) if rng.random() < words_prob else str(n)


def question(rng, op, a, b, words_prob=0.3):
    return rng.choice(QUESTIONS[op]).format(a=say(rng, a, words_prob), b=say(rng, b, words_prob))


def follow_up(rng, prev, avoid_held_out=False):
    """A follow-up on the previous answer: (text, op, operand, result) or
    None. Training avoids follow-ups that compute a held-out pair."""
    choices = ["+", "-"] + (["*"] if prev <= 12 else [])
    op = rng.choice(choices)
    if op == "+":
        n = rng.randint(0, 99)
    elif op == "-":
        if prev == 0:
            return None
        n = rng.randint(0, min(prev, 99))
    else:
        n = rng.randint(0, 12)
    if avoid_held_out and held_out_pair(op, prev, n):
        return None
    return rng.choice(FOLLOW[op]).format(n=say(rng, n, 0.3)), op, n, apply_op(op, prev, n)


# ---- long-context recall ----------------------------------------------------

# Keys and values: words that the tokenizer learns as single tokens (checked
# after training; words that are not single tokens are dropped).
RECALL_KEYS = ["falcon", "otter", "badger", "heron", "lynx", "walrus", "beaver", "cobra", "panda", "raven",
               "turtle", "salmon", "gecko", "bison", "camel", "donkey", "eagle", "ferret", "goose", "hyena",
               "jaguar", "koala", "lemur", "moose", "newt", "ocelot", "parrot", "quail", "rabbit", "spider",
               "tiger", "viper", "whale", "zebra", "mole", "crab", "frog", "owl", "wolf", "fox", "bear",
               "duck", "goat", "horse", "mouse", "seal", "shark", "sheep"]
RECALL_VALUES = ["amber", "cobalt", "silver", "crimson", "violet", "indigo", "scarlet", "ivory", "olive",
                 "maroon", "copper", "bronze", "golden", "azure", "coral", "jade", "ruby", "pearl", "topaz",
                 "onyx", "mango", "lemon", "cherry", "plum", "peach", "melon", "grape", "apple", "banana",
                 "papaya", "walnut", "almond", "cedar", "maple", "willow", "birch", "tulip", "daisy",
                 "lotus", "orchid", "comet", "meteor", "nebula", "quartz", "marble", "granite", "velvet",
                 "cotton"]

FACT_TEMPLATES = ["The password of {k} is {v}.", "Remember that the password of {k} is {v}.",
                  "Note: the password of {k} is {v}."]
# The same facts with the value first. Then the fact's KEY token, which
# follows its VALUE, can hold the value, and an answer finds the fact by
# matching the key token itself (one attention hop); with the key first the
# value's own position must first learn which key precedes it.
FACT_TEMPLATES_VALUE_FIRST = ["{v} is the password of {k}.", "Remember: {v} is the password of {k}.",
                              "Note that {v} is the password of {k}."]


def fact_templates(value_first):
    return FACT_TEMPLATES_VALUE_FIRST if value_first else FACT_TEMPLATES
RECALL_QUESTIONS = ["What is the password of {k}?", "Tell me the password of {k}.",
                    "Which password does {k} have?"]
RECALL_ANSWER = "The password of {k} is {v}."
RECALL_INSTRUCTIONS = ["Read the notes below and answer the question at the end.",
                       "Here are some notes. Answer the question after them.",
                       "Read this text carefully."]

FILLER_SUBJECTS = ["The river", "A small boat", "The old mill", "Our neighbor", "The garden", "A quiet road",
                   "The north wind", "The market", "A tall tree", "The village", "The morning train",
                   "A young farmer", "The library", "The harbor", "An old clock", "The bakery"]
FILLER_VERBS = ["runs past", "waits near", "leans toward", "stands behind", "looks at", "moves along",
                "turns away from", "rests beside", "drifts past", "points to", "sits under", "follows"]
FILLER_OBJECTS = ["the stone bridge", "the green hills", "the empty field", "the narrow street",
                  "the wooden fence", "the dark forest", "the calm lake", "the busy square", "the white house",
                  "the long wall", "the open gate", "the sandy shore", "the red barn", "the high tower"]
FILLER_TAILS = ["", " every day", " in the evening", " before noon", " after the rain", " all summer",
                " without a sound", " once again", " as usual", " for a while"]


def filler_sentence(rng):
    return (rng.choice(FILLER_SUBJECTS) + " " + rng.choice(FILLER_VERBS) + " " + rng.choice(FILLER_OBJECTS) +
            rng.choice(FILLER_TAILS) + ".")


def recall_document(rng, keys, values, n_sentences, n_facts, value_first=False):
    """Filler sentences with n_facts facts at random depths; returns
    (text, [(key, value)], asked index)."""
    ks = rng.sample(keys, n_facts)
    vs = [rng.choice(values) for _ in ks]
    sentences = [filler_sentence(rng) for _ in range(n_sentences)]
    where = sorted(rng.sample(range(n_sentences + 1), n_facts))
    for i, (pos, k, v) in reversed(list(enumerate(zip(where, ks, vs)))):
        sentences.insert(pos, rng.choice(fact_templates(value_first)).format(k=k, v=v))
    return " ".join(sentences), list(zip(ks, vs)), rng.randrange(n_facts)


# ---- the chat template ------------------------------------------------------

def render_prefix(messages, add_generation_prompt=True, enable_thinking=True):
    """The model's chat template (GLM-5's, tokenizer_config.json) for
    system/user/assistant messages without tools or reasoning content."""
    out = ["[gMASK]<sop>"]
    for m in messages:
        if m["role"] == "user":
            out.append("<|user|>" + m["content"])
        elif m["role"] == "system":
            out.append("<|system|>" + m["content"])
        else:
            out.append("<|assistant|></think>" + m["content"].strip())
    if add_generation_prompt:
        out.append("<|assistant|>" + ("<think>" if enable_thinking else "</think>"))
    return "".join(out)


def conversation_segments(turns, system=None, enable_thinking=True):
    """turns: [(user text, answer text)], every answer a loss target.
    Earlier answers appear as the template renders history; the last one
    follows the generation prompt, as the server will ask for it."""
    segs = [("[gMASK]<sop>", False)]
    if system is not None:
        segs.append(("<|system|>" + system, False))
    for i, (user, answer) in enumerate(turns):
        last = i == len(turns) - 1
        # <|user|> after an answer is the model's end of turn (an EOS id).
        segs.append(("<|user|>", i > 0))
        segs.append((user, False))
        if last:
            segs.append(("<|assistant|>" + ("<think>" if enable_thinking else "</think>"), False))
            segs.append((("</think>" if enable_thinking else "") + answer, True))
            segs.append(("<|user|>", True))
        else:
            segs.append(("<|assistant|></think>", False))
            segs.append((answer, True))
    return segs


def messages_of(turns, system=None):
    msgs = [] if system is None else [{"role": "system", "content": system}]
    for user, answer in turns:
        msgs.append({"role": "user", "content": user})
        msgs.append({"role": "assistant", "content": answer})
    return msgs


# ---- generators ---------------------------------------------------------------

class Generator:
    def __init__(self, seed, recall_keys, recall_values, value_first=False):
        self.rng = random.Random(seed)
        self.value_first = value_first
        self.keys = recall_keys
        self.values = recall_values

    def arithmetic(self):
        """One conversation of 1..3 turns: a question, then follow-ups."""
        rng = self.rng
        op = rng.choice(OPS)
        a, b = draw_pair(rng, op, held_out=False)
        r = apply_op(op, a, b)
        turns = [(question(rng, op, a, b), str(r))]
        n_follow = rng.choices([0, 1, 2], weights=[0.55, 0.3, 0.15])[0]
        for _ in range(n_follow):
            f = follow_up(rng, r, avoid_held_out=True)
            if f is None:
                break
            text, _, _, r = f
            turns.append((text, str(r)))
        system = rng.choice(SYSTEM_PROMPTS) if rng.random() < 0.2 else None
        return conversation_segments(turns, system, enable_thinking=rng.random() < 0.75)

    def recall(self, n_sentences, max_facts=5, ask_all=False):
        """A document with 2..max_facts facts and a question about one of
        them; with ask_all, follow-up turns then ask about every other fact
        (each answer trained). One planted fact gives one informative answer
        token (the VALUE; the rest of the answer is copied from the
        question), so asking about all of them multiplies the recall signal
        per document."""
        rng = self.rng
        n_facts = rng.randint(2, min(max_facts, n_sentences + 1))
        doc, facts, asked = recall_document(rng, self.keys, self.values, n_sentences, n_facts, self.value_first)
        order = [asked]
        if ask_all:
            rest = [i for i in range(n_facts) if i != asked]
            rng.shuffle(rest)
            order += rest
        turns = []
        for j, i in enumerate(order):
            k, v = facts[i]
            head = rng.choice(RECALL_INSTRUCTIONS) + "\n\n" + doc + "\n\n" if j == 0 else ""
            user = head + rng.choice(RECALL_QUESTIONS).format(k=k)
            turns.append((user, RECALL_ANSWER.format(k=k, v=v)))
        system = rng.choice(SYSTEM_PROMPTS) if rng.random() < 0.1 else None
        return conversation_segments(turns, system, enable_thinking=rng.random() < 0.75)


# ---- evaluation sets -------------------------------------------------------------

def arithmetic_eval(seed, count):
    """Held-out single-turn questions: add/sub from held-out pairs only."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        op = OPS[i % 3]
        a, b = draw_pair(rng, op, held_out=True if op != "*" else None)
        cases.append({"op": op, "a": a, "b": b, "question": question(rng, op, a, b),
                      "answer": str(apply_op(op, a, b)), "enable_thinking": i % 4 != 3})
    return cases


def multi_turn_eval(seed, count):
    """Conversations whose first turn is a held-out pair, with 1-2 follow-ups."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        op = rng.choice(["+", "-"])
        a, b = draw_pair(rng, op, held_out=True)
        r = apply_op(op, a, b)
        turns = [{"user": question(rng, op, a, b), "answer": str(r), "op": op, "a": a, "b": b}]
        for _ in range(rng.randint(1, 2)):
            f = follow_up(rng, r)
            if f is None:
                break
            text, fop, n, r2 = f
            turns.append({"user": text, "answer": str(r2), "op": fop, "a": r, "b": n})
            r = r2
        if len(turns) >= 2:
            cases.append({"turns": turns})
    return cases


def recall_eval(seed, keys, values, sentence_counts, per_count, value_first=False):
    """Recall conversations at the given filler sizes."""
    rng = random.Random(seed)
    cases = []
    for n in sentence_counts:
        for _ in range(per_count):
            n_facts = rng.randint(2, 5)
            doc, facts, asked = recall_document(rng, keys, values, n, n_facts, value_first)
            k, v = facts[asked]
            user = (rng.choice(RECALL_INSTRUCTIONS) + "\n\n" + doc + "\n\n" +
                    rng.choice(RECALL_QUESTIONS).format(k=k))
            cases.append({"user": user, "key": k, "value": v, "answer": RECALL_ANSWER.format(k=k, v=v),
                          "facts": [[fk, fv] for fk, fv in facts], "sentences": n})
    return cases


def tokenizer_corpus(seed, count):
    """Text for training the BPE: every kind of conversation, rendered."""
    rng = random.Random(seed)
    gen = Generator(seed + 1, RECALL_KEYS, RECALL_VALUES)
    texts = []
    for i in range(count):
        segs = gen.arithmetic() if i % 4 else gen.recall(rng.randint(5, 30))
        texts.append("".join(t for t, _ in segs))
    # Recall keys and values often enough to become single tokens.
    for w in RECALL_KEYS + RECALL_VALUES:
        texts.append(" ".join([w] * 300))
    # Every number word and every number up to 999 at least once.
    texts.append(" ".join(number_words(n) for n in range(1000)))
    texts.append(" ".join(str(n) for n in range(1000)))
    return texts
