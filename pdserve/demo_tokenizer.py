"""The demo model's tokenizer: byte-level BPE trained locally on a built-in corpus, with a
Llama-3-style chat template (split out of demo_model.py; same behaviour and bytes).

`train_tokenizer()` is deterministic; `save_tokenizer()` writes the Hugging Face files.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tokenizers import Tokenizer

BOS_TOKEN: Final = "<|begin_of_text|>"
EOS_TOKEN: Final = "<|end_of_text|>"
START_HEADER_TOKEN: Final = "<|start_header_id|>"
END_HEADER_TOKEN: Final = "<|end_header_id|>"
EOT_TOKEN: Final = "<|eot_id|>"
PAD_TOKEN: Final = "<|pad|>"
SPECIAL_TOKENS: Final[tuple[str, ...]] = (
    BOS_TOKEN,
    EOS_TOKEN,
    START_HEADER_TOKEN,
    END_HEADER_TOKEN,
    EOT_TOKEN,
    PAD_TOKEN,
)

TOKENIZER_VOCAB_SIZE: Final = 2048
MODEL_MAX_LENGTH: Final = 8192

CORPUS_SEED: Final = 20240601
CORPUS_SENTENCES: Final = 4000

# Llama-3-style chat template. It emits the bos token itself (the tokenizer does not add
# one). Message content may be a string, None, or a list of OpenAI-style content parts
# (only the "text" parts are rendered). Assistant tool calls are rendered as JSON.
CHAT_TEMPLATE: Final = (
    "{{- bos_token }}\n"
    "{%- for message in messages %}\n"
    "    {%- if message['role'] not in ['system', 'user', 'assistant', 'tool'] %}\n"
    "        {{- raise_exception('Unsupported role: ' + message['role']) }}\n"
    "    {%- endif %}\n"
    "    {%- if message['content'] is string %}\n"
    "        {%- set content = message['content'] %}\n"
    "    {%- elif message['content'] is none or message['content'] is undefined %}\n"
    "        {%- set content = '' %}\n"
    "    {%- else %}\n"
    "        {%- set ns = namespace(text='') %}\n"
    "        {%- for part in message['content'] %}\n"
    "            {%- if part['type'] == 'text' %}\n"
    "                {%- set ns.text = ns.text + part['text'] %}\n"
    "            {%- endif %}\n"
    "        {%- endfor %}\n"
    "        {%- set content = ns.text %}\n"
    "    {%- endif %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}\n"
    "    {{- content | trim }}\n"
    "    {%- if message['role'] == 'assistant' and message['tool_calls'] is defined"
    " and message['tool_calls'] %}\n"
    "        {%- for tool_call in message['tool_calls'] %}\n"
    "            {%- if tool_call['function'] is defined %}\n"
    "                {%- set tool_call = tool_call['function'] %}\n"
    "            {%- endif %}\n"
    "            {{- '{\"name\": \"' + tool_call['name'] + '\", \"parameters\": ' }}\n"
    "            {{- tool_call['arguments'] | tojson + '}' }}\n"
    "        {%- endfor %}\n"
    "    {%- endif %}\n"
    "    {{- '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n"
)

# Whitespace-separated word lists for the training corpus (split in _corpus).
_WORDS: Final = """
    the a an this that these those some every each any no many few several all both
    i you he she it we they me him her us them my your his its our their who what
    which where when why how there here now then today tomorrow yesterday always never
    often sometimes usually soon later again already still just only also very quite
    rather too more most less least much little really almost enough together alone
    is are was were be been being am has have had do does did will would can could
    shall should may might must go goes went gone make makes made take takes took see
    sees saw know knows knew think thinks thought come comes came want wants wanted
    look looks looked use uses used find finds found give gives gave tell tells told
    work works worked call calls called try tries tried ask asks asked need needs needed
    feel feels felt become becomes became leave leaves left put puts keep keeps kept
    let lets begin begins began seem seems seemed help helps helped talk talks talked
    turn turns turned start starts started show shows showed hear hears heard play
    plays played run runs ran move moves moved like likes liked live lives lived
    believe believes believed hold holds held bring brings brought happen happens
    write writes wrote provide provides sit sits sat stand stands stood lose loses lost
    pay pays paid meet meets met include includes continue continues set sets learn
    learns learned change changes changed lead leads led understand understands watch
    watches watched follow follows followed stop stops stopped create creates created
    speak speaks spoke read reads allow allows add adds added spend spends spent grow
    grows grew open opens opened walk walks walked win wins won offer offers offered
    remember remembers love loves loved consider considers appear appears buy buys
    bought wait waits waited serve serves served die dies died send sends sent expect
    build builds built stay stays stayed fall falls fell cut cuts reach reaches kill
    remain remains suggest raise pass sell sells sold require report decide pull
    time year people way day man woman child children world life hand part place case
    week company system program question work government number night point home
    water room mother father area money story fact month lot right study book eye job
    word business issue side kind head house service friend power hour game line end
    member law car city community name president team minute idea kid body information
    back parent face others level office door health person art war history party
    result morning reason research girl guy moment air teacher force education foot
    boy age policy process music market sense nation plan college interest death
    experience effect class control care field development role effort rate heart
    drug show leader light voice wife police mind price report decision son view
    relationship town road arm difference value building action model season society
    tax director position player record paper space ground form event official matter
    center couple site project activity star table need court oil situation cost
    industry figure street image phone data picture practice piece land product doctor
    wall patient worker news test movie north south east west love support technology
    step baby computer type attention film tree source organization hair window
    evidence population site garden river mountain forest ocean island bridge village
    kitchen bread cheese apple orange coffee tea cake sugar salt dog cat bird horse
    fish cow sheep lion tiger bear rabbit mouse server request response token model
    engine cache memory queue batch prompt stream thread socket network packet signal
    good new first last long great little own other old right big high different small
    large next early young important few public bad same able free sure clear full
    special easy strong certain whole real best better true hot cold warm cool quiet
    loud happy sad bright dark green blue red yellow white black brown gray simple
    quick slow heavy light fast careful gentle brave calm clever kind proud wild
    and or but so because if although while until unless since though whether
    of in to for with on at from by about as into like through after over between out
    against during without before under around among above below behind beside near
    one two three four five six seven eight nine ten hundred thousand
"""

_SYLLABLES: Final = """
    ba be bi bo bu da de di do du fa fe fi fo fu ga ge gi go gu ka ke ki ko ku la le
    li lo lu ma me mi mo mu na ne ni no nu pa pe pi po pu ra re ri ro ru sa se si so
    su ta te ti to tu va ve vi vo vu za ze zi zo zu an en in on un ar er ir or ur al
    el il ol ul st tr pl br cr gr th sh ch wh ing ed er est ly tion ment ness able
"""

_PUNCTUATION: Final[tuple[str, ...]] = (".", ".", ".", "!", "?", "...")


def corpus() -> Iterator[str]:
    """Yield the deterministic built-in training corpus (independent of the model seed)."""
    rng = random.Random(CORPUS_SEED)
    words_list = _WORDS.split()
    syllables = _SYLLABLES.split()
    pseudo_words = [
        "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(600)
    ]
    for index in range(CORPUS_SENTENCES):
        words: list[str] = []
        for _ in range(rng.randint(4, 16)):
            roll = rng.random()
            if roll < 0.78:
                words.append(rng.choice(words_list))
            elif roll < 0.93:
                words.append(rng.choice(pseudo_words))
            else:
                words.append(str(rng.randint(0, 2000)))
            if rng.random() < 0.06:
                words[-1] += ","
        words[0] = words[0].capitalize()
        sentence = " ".join(words) + rng.choice(_PUNCTUATION)
        if index % 7 == 0:
            sentence = f'"{sentence}" {rng.choice(("she said", "he asked", "they wrote"))}.'
        if index % 11 == 0:
            sentence += "\n"
        yield sentence


def train_tokenizer() -> Tokenizer:
    """Train the byte-level BPE tokenizer (exactly ``TOKENIZER_VOCAB_SIZE`` tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB_SIZE,
        min_frequency=1,
        show_progress=False,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    if tokenizer.get_vocab_size() != TOKENIZER_VOCAB_SIZE:
        raise RuntimeError(
            f"demo tokenizer has {tokenizer.get_vocab_size()} tokens, "
            f"expected {TOKENIZER_VOCAB_SIZE}; the built-in corpus is too small"
        )
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != expected_id:
            raise RuntimeError(f"special token {token!r} did not get id {expected_id}")
    return tokenizer


def emittable_token_ids(tokenizer: Tokenizer) -> list[int]:
    """Ids of non-special tokens that decode on their own to non-empty printable ASCII."""
    special = set(SPECIAL_TOKENS)
    ids: list[int] = []
    for token_id in range(tokenizer.get_vocab_size()):
        if tokenizer.id_to_token(token_id) in special:
            continue
        text = tokenizer.decode([token_id], skip_special_tokens=False)
        if text and all(" " <= char <= "~" for char in text):
            ids.append(token_id)
    return ids


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as stable, sorted, indented JSON with a trailing newline."""
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def save_tokenizer(tokenizer: Tokenizer, out_dir: Path) -> None:
    """Save ``tokenizer`` as a ``PreTrainedTokenizerFast`` plus legacy-compatible metadata."""
    from transformers import PreTrainedTokenizerFast

    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[START_HEADER_TOKEN, END_HEADER_TOKEN, EOT_TOKEN],
        add_bos_token=False,
        add_eos_token=False,
        chat_template=CHAT_TEMPLATE,
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
    )
    hf_tokenizer.save_pretrained(str(out_dir))
    # Depending on the transformers version, save_pretrained writes the chat template to
    # chat_template.jinja and/or tokenizer_config.json and may skip special_tokens_map.json
    # and add_bos_token. Write a complete, version-independent set of files.
    config_path = out_dir / "tokenizer_config.json"
    config: dict[str, Any] = json.loads(config_path.read_text(encoding="utf-8"))
    config.update(
        {
            "add_bos_token": False,
            "add_eos_token": False,
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "pad_token": PAD_TOKEN,
            "chat_template": CHAT_TEMPLATE,
            "clean_up_tokenization_spaces": False,
            "model_max_length": MODEL_MAX_LENGTH,
            "tokenizer_class": "PreTrainedTokenizerFast",
        }
    )
    write_json(config_path, config)
    (out_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    write_json(
        out_dir / "special_tokens_map.json",
        {
            "additional_special_tokens": [START_HEADER_TOKEN, END_HEADER_TOKEN, EOT_TOKEN],
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "pad_token": PAD_TOKEN,
        },
    )
