"""Deterministic, fully offline tiny Llama demo model for pdserve.

:func:`create_demo_model` builds a small Hugging Face model folder (a random-weight
``LlamaForCausalLM`` plus a locally trained byte-level BPE tokenizer with a Llama-3-style
chat template) that vLLM and ``transformers`` can load without any network access. It is
meant for tests, demos and smoke checks, not for producing meaningful text.

Folder layout written by :func:`create_demo_model`::

    config.json              LlamaConfig (float32, 2 layers, hidden 128, vocab 2048)
    generation_config.json   greedy-neutral (do_sample=False, no temperature/top-k/top-p)
    model.safetensors        float32 weights, deterministic from ``seed``
    tokenizer.json           byte-level BPE, 2048 tokens including 6 special tokens
    tokenizer_config.json    bos/eos/pad, add_bos_token=False, chat_template
    special_tokens_map.json  bos/eos/pad
    chat_template.jinja      the same chat template (transformers>=5 layout)
    pdserve_demo.json        marker: {"name": "pdserve-demo", "seed": ..., "format_version": 1}

Properties relied upon by callers:

* Byte-identical ``model.safetensors`` and ``tokenizer.json`` for the same ``seed`` (and the
  same installed library versions). The tokenizer does not depend on ``seed``.
* The chat template emits ``<|begin_of_text|>`` itself and the tokenizer never adds it, so
  ``tokenizer.apply_chat_template(..., tokenize=True)`` yields exactly one bos token.
* The output head rows of special tokens and of tokens that do not decode to printable ASCII
  are zero, so greedy (and in practice any) decoding only ever emits printable ASCII text
  and never emits an end-of-sequence token: generations always run to ``max_tokens``
  (finish reason ``"length"``) unless a stop string matches.
* Weights use a large ``initializer_range`` (0.2), giving logits with a spread of a few
  units and a median top-1/top-2 gap of about 0.5, so greedy decoding is robust to small
  numerical differences between backends (exact near-ties remain possible but rare).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch
    from tokenizers import Tokenizer

DEMO_MODEL_NAME: Final = "pdserve-demo"
FORMAT_VERSION: Final = 1
MARKER_FILE: Final = "pdserve_demo.json"

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
VOCAB_MULTIPLE: Final = 64
HIDDEN_SIZE: Final = 128
INTERMEDIATE_SIZE: Final = 256
NUM_HIDDEN_LAYERS: Final = 2
NUM_ATTENTION_HEADS: Final = 4
NUM_KEY_VALUE_HEADS: Final = 2
HEAD_DIM: Final = 32
MAX_POSITION_EMBEDDINGS: Final = 8192
ROPE_THETA: Final = 500000.0
RMS_NORM_EPS: Final = 1e-5
INITIALIZER_RANGE: Final = 0.2

CORPUS_SEED: Final = 20240601
CORPUS_SENTENCES: Final = 4000

REQUIRED_FILES: Final[tuple[str, ...]] = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    MARKER_FILE,
)

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


def _corpus() -> Iterator[str]:
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


def _train_tokenizer() -> Tokenizer:
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
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    if tokenizer.get_vocab_size() != TOKENIZER_VOCAB_SIZE:
        raise RuntimeError(
            f"demo tokenizer has {tokenizer.get_vocab_size()} tokens, "
            f"expected {TOKENIZER_VOCAB_SIZE}; the built-in corpus is too small"
        )
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != expected_id:
            raise RuntimeError(f"special token {token!r} did not get id {expected_id}")
    return tokenizer


def _model_vocab_size(tokenizer_vocab_size: int) -> int:
    """Round the tokenizer vocabulary up to a multiple of ``VOCAB_MULTIPLE``."""
    return -(-tokenizer_vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def _emittable_token_ids(tokenizer: Tokenizer) -> list[int]:
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


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as stable, sorted, indented JSON with a trailing newline."""
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _save_tokenizer(tokenizer: Tokenizer, out_dir: Path) -> None:
    """Save ``tokenizer`` as a ``PreTrainedTokenizerFast`` plus legacy-compatible metadata."""
    from transformers import PreTrainedTokenizerFast

    hf_tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[START_HEADER_TOKEN, END_HEADER_TOKEN, EOT_TOKEN],
        add_bos_token=False,
        add_eos_token=False,
        chat_template=CHAT_TEMPLATE,
        model_max_length=MAX_POSITION_EMBEDDINGS,
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
            "model_max_length": MAX_POSITION_EMBEDDINGS,
            "tokenizer_class": "PreTrainedTokenizerFast",
        }
    )
    _write_json(config_path, config)
    (out_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    _write_json(
        out_dir / "special_tokens_map.json",
        {
            "additional_special_tokens": [START_HEADER_TOKEN, END_HEADER_TOKEN, EOT_TOKEN],
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "pad_token": PAD_TOKEN,
        },
    )


def _init_weights(model: torch.nn.Module, seed: int, emittable_ids: list[int]) -> None:
    """Deterministically (re)initialise every parameter of ``model`` from ``seed``.

    Norm weights are ones; every other matrix is N(0, INITIALIZER_RANGE) drawn from a
    dedicated generator in sorted parameter-name order, so the result does not depend on
    how ``transformers`` initialises or orders modules. Output-head rows of tokens not in
    ``emittable_ids`` are zeroed so those tokens can never win an argmax.
    """
    import torch

    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        for name in sorted(parameters):
            parameter = parameters[name]
            if name.endswith("norm.weight"):
                parameter.fill_(1.0)
            else:
                parameter.copy_(
                    torch.normal(
                        0.0,
                        INITIALIZER_RANGE,
                        size=tuple(parameter.shape),
                        generator=generator,
                        dtype=torch.float32,
                    )
                )
        lm_head = parameters["lm_head.weight"]
        keep = torch.zeros(lm_head.shape[0], dtype=torch.bool)
        keep[emittable_ids] = True
        lm_head[~keep] = 0.0


def _save_model(out_dir: Path, seed: int, tokenizer: Tokenizer) -> None:
    """Build the tiny ``LlamaForCausalLM`` for ``seed`` and save it with its configs."""
    import torch
    from safetensors.torch import save_file
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    bos_id = tokenizer.token_to_id(BOS_TOKEN)
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    eot_id = tokenizer.token_to_id(EOT_TOKEN)
    pad_id = tokenizer.token_to_id(PAD_TOKEN)
    config = LlamaConfig(
        vocab_size=_model_vocab_size(tokenizer.get_vocab_size()),
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_HIDDEN_LAYERS,
        num_attention_heads=NUM_ATTENTION_HEADS,
        num_key_value_heads=NUM_KEY_VALUE_HEADS,
        head_dim=HEAD_DIM,
        hidden_act="silu",
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        initializer_range=INITIALIZER_RANGE,
        rms_norm_eps=RMS_NORM_EPS,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
        architectures=["LlamaForCausalLM"],
    )
    # fork_rng keeps the caller's global RNG state untouched while still seeding the
    # default initialisation (which _init_weights then overwrites completely).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]
    _init_weights(model, seed, _emittable_token_ids(tokenizer))
    dtypes = {tensor.dtype for tensor in model.state_dict().values()}
    if dtypes != {torch.float32}:
        raise RuntimeError(f"demo model weights must be float32, got {dtypes}")
    # Write the files directly rather than via model.save_pretrained: no progress bar, no
    # version-dependent weight conversion, plain file permissions, sorted tensor names.
    state_dict = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    save_file(state_dict, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(str(out_dir))
    GenerationConfig(  # type: ignore[no-untyped-call]
        bos_token_id=bos_id,
        eos_token_id=[eos_id, eot_id],
        pad_token_id=pad_id,
        do_sample=False,
    ).save_pretrained(str(out_dir))


def _read_marker(path: Path) -> dict[str, Any] | None:
    """Return the parsed marker file of ``path``, or None if it is missing or invalid."""
    try:
        data = json.loads((path / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("name") != DEMO_MODEL_NAME:
        return None
    return data


def _is_complete(path: Path, seed: int | None) -> bool:
    """Check that ``path`` holds a complete current-format demo model (for ``seed`` if given)."""
    marker = _read_marker(path)
    if marker is None or marker.get("format_version") != FORMAT_VERSION:
        return False
    if seed is not None and marker.get("seed") != seed:
        return False
    return all((path / name).is_file() for name in REQUIRED_FILES)


def is_demo_model(path: Path) -> bool:
    """Return True if ``path`` is a complete demo model folder of the current format.

    Checks the ``pdserve_demo.json`` marker (name ``"pdserve-demo"`` and the current
    ``format_version``) and that all model and tokenizer files are present. Any seed is
    accepted. Never raises for missing or unreadable paths; returns False instead.
    """
    try:
        return Path(path).is_dir() and _is_complete(Path(path), None)
    except OSError:
        return False


def _finalize_tree(path: Path) -> None:
    """Make files in ``path`` world-readable and flush them and the directory to disk."""
    path.chmod(0o755)
    for child in sorted(path.iterdir()):
        if child.is_file():
            child.chmod(0o644)  # safetensors writes 0600; the folder may be shared
            fd = os.open(child, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _build(out_dir: Path, seed: int) -> None:
    """Write every demo model file into the (existing, empty) directory ``out_dir``."""
    tokenizer = _train_tokenizer()
    _save_tokenizer(tokenizer, out_dir)
    _save_model(out_dir, seed, tokenizer)
    # The marker is written last: a folder with a valid marker is complete.
    _write_json(
        out_dir / MARKER_FILE,
        {"name": DEMO_MODEL_NAME, "seed": seed, "format_version": FORMAT_VERSION},
    )
    _finalize_tree(out_dir)


def create_demo_model(out_dir: Path, *, seed: int = 0) -> Path:
    """Create (or reuse) the tiny offline Llama demo model in ``out_dir`` and return ``out_dir``.

    Contract:

    * Fully offline and deterministic: the same ``seed`` (with the same installed
      library versions) gives byte-identical ``model.safetensors`` and ``tokenizer.json``.
    * Idempotent: if ``out_dir`` already holds a complete demo model with the same ``seed``
      and the current format version, it is returned without rebuilding.
    * Atomic: the model is built in a temporary sibling directory and renamed into place,
      so ``out_dir`` is either absent/unchanged or a complete model, never half-written.
    * An existing ``out_dir`` is replaced only if it is empty or is a demo model (of another
      seed or format version); any other existing path raises :class:`FileExistsError`.
    * Parent directories are created as needed. The caller's global torch RNG state is not
      modified. Takes a few seconds (mostly importing ``transformers``).

    Args:
        out_dir: Destination folder.
        seed: Non-negative integer (< 2**63) that determines the model weights. The
            tokenizer is the same for every seed.

    Returns:
        ``out_dir`` (as given, converted to :class:`pathlib.Path`).

    Raises:
        ValueError: If ``seed`` is not an integer in ``[0, 2**63)``.
        FileExistsError: If ``out_dir`` exists and is neither empty nor a demo model.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    out_dir = Path(out_dir)
    if _is_complete(out_dir, seed):
        return out_dir
    _check_replaceable(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        _build(tmp_dir, seed)
        _install(tmp_dir, out_dir, seed)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return out_dir


def _check_replaceable(out_dir: Path) -> None:
    """Raise FileExistsError if ``out_dir`` exists and must not be replaced."""
    if not os.path.lexists(out_dir):
        return
    if (
        out_dir.is_dir()
        and not out_dir.is_symlink()
        and (_read_marker(out_dir) is not None or not any(out_dir.iterdir()))
    ):
        return
    raise FileExistsError(f"{out_dir} exists and is not a pdserve demo model; not replacing it")


def _install(tmp_dir: Path, out_dir: Path, seed: int) -> None:
    """Atomically move the finished ``tmp_dir`` to ``out_dir``.

    Tolerates a concurrent creator finishing first (its identical result is kept). An old
    demo model of another seed/format is moved aside and deleted after the swap.
    """
    try:
        tmp_dir.rename(out_dir)  # atomic; also replaces an empty directory
        return
    except OSError:
        if _is_complete(out_dir, seed):
            return  # someone else built the same model concurrently
        _check_replaceable(out_dir)
    old_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
    try:
        out_dir.rename(old_dir / "model")
        tmp_dir.rename(out_dir)
    finally:
        shutil.rmtree(old_dir, ignore_errors=True)
