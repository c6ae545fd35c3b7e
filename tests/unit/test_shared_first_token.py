"""Issue 46 point 7: answers that share their first tokens. Under the plain template SmolLM2's tokenizer writes
every answer as a space token and then its digits (" 11" = [" ", "1", "1"]), and "11" and "10" share their first
digit: the direct logit attribution reads where the two answers it compares first differ, the shared tokens
teacher-forced, and says at which answer position it read. Checked on a tiny Llama built to answer " 10" whatever
the count (its attention and MLPs random and small, so that every component writes something), against plain
forwards of the prompt with the shared prefix appended, with no hook; and the lens's refusal, one line, exit 2,
naming no option the model cannot take."""

import shutil

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError
from countlens.llm.answers import answer_token_ids, divergence
from countlens.llm.components.experiment import ComponentsConfig, run_components
from countlens.llm.models import ModelSpec, load_model
from countlens.llm.prompts import PromptSettings, build_prompts
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_model_dir, tiny_models  # noqa: F401
from tests.helpers.tiny_models import tiny_config


def test_divergence_is_the_first_position_where_the_answers_differ():
    assert divergence([[216, 33, 33], [216, 33, 32]]) == divergence([(216, 33, 33), (216, 33, 32), (216, 33, 34)])
    d = divergence([[216, 33, 33], [216, 33, 32]])
    assert (d.prefix, d.position, d.readable) == ((216, 33), 2, True)
    assert divergence([[33], [34, 32]]).position == 0 and divergence([[33], [34]]).prefix == ()
    ended = divergence([[216, 33], [216, 33, 32]])  # " 1" ends where " 10" goes on
    assert (ended.position, ended.ended, ended.readable) == (2, True, False)
    with pytest.raises(ValueError, match="no answer position tells them apart"):
        divergence([[216, 33], [216, 33]])


@pytest.fixture(scope="module")
def answers_ten(tmp_path_factory, smollm2_tokenizer):  # noqa: F811
    """A tiny Llama that answers " 10" after "Answer:" whatever the count: the embeddings put ":" on axis 0, " " on
    axis 1, "1" on 2, "0" on 3 and every other token on 4; the unembedding maps axis 0 to " ", 1 to "1", 2 to "0",
    3 and 4 to end-of-text (weights 10). Attention and MLPs keep their small random initialisation (seed 0): every
    component writes a little, none changes the answer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_tokenizer))
    config = tiny_config("llama", len(tok), tok.bos_token_id or 0, tok.eos_token_id, tok.pad_token_id or 0)
    config.tie_word_embeddings = False
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    colon, one, zero = (tok(t, add_special_tokens=False)["input_ids"][-1] for t in ("Answer:", "1", "0"))
    space = tok(" 1", add_special_tokens=False)["input_ids"][0]
    assert tok(" 1", add_special_tokens=False)["input_ids"] == [space, one]  # the space is a token of its own
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb.zero_()
        emb[:, 4] = 5.0
        for token, axis in ((colon, 0), (space, 1), (one, 2), (zero, 3)):
            emb[token] = 0.0
            emb[token, axis] = 5.0
        head = model.get_output_embeddings().weight
        head.zero_()
        head[space, 0] = head[one, 1] = head[zero, 2] = 10.0
        head[tok.eos_token_id, 3] = head[tok.eos_token_id, 4] = 10.0
    folder = tmp_path_factory.mktemp("answers-ten")
    model.save_pretrained(str(folder))
    for item in smollm2_tokenizer.iterdir():
        if item.is_file():
            shutil.copy2(item, folder / item.name)
    return folder


def direct(model, ids) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """One unpadded forward with no countlens hook: the last position's logits (V,), the last block's raw output
    there (d,) (the final norm's input, read by a forward pre-hook) and every location's residual there
    (``output_hidden_states``: location 0 the embeddings, then the blocks' outputs; the last one is the raw
    output's own norm in this transformers version, so it is taken from the pre-hook)."""
    seen = {}
    handle = model.model.norm.register_forward_pre_hook(lambda m, a: seen.__setitem__("raw", a[0][0, -1].clone()))
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([list(ids)]), output_hidden_states=True)
    finally:
        handle.remove()
    hidden = [h[0, -1].double().numpy() for h in out.hidden_states[:-1]] + [seen["raw"].double().numpy()]
    return out.logits[0, -1].double().numpy(), seen["raw"].double().numpy(), hidden


def assert_read_by_hand(model, rows: list[dict], ld: float, ids: list[int], a: int, b: int) -> None:
    """One read-out's attribution ``rows`` and its logit difference ``ld`` (token ``a`` minus ``b`` after
    ``ids``) against a forward with no countlens hook: the total, and each location's write read through the
    final norm frozen at the real residual, by hand."""
    logits, raw, hidden = direct(model, ids)
    want = logits[a] - logits[b]
    assert rows[0]["total"] == pytest.approx(want, abs=1e-4)
    assert ld == pytest.approx(want, abs=1e-4)
    assert sum(r["contribution"] for r in rows if r["kind"] != "head") == pytest.approx(want, abs=1e-4)
    w_u = model.get_output_embeddings().weight.detach().double().numpy()
    gain = model.model.norm.weight.detach().double().numpy()
    k = 1.0 / np.sqrt(np.mean(raw ** 2) + model.model.norm.variance_epsilon)
    read = (w_u[a] - w_u[b]) * gain * k
    got = {r["layer"]: 0.0 for r in rows}
    for r in rows:
        if r["kind"] in ("attn", "mlp"):
            got[r["layer"]] += r["contribution"]
    embed = next(r["contribution"] for r in rows if r["kind"] == "embed")
    assert embed == pytest.approx(float(read @ hidden[0]), abs=1e-4)
    for block in range(model.config.num_hidden_layers):
        assert got[block] == pytest.approx(float(read @ (hidden[block + 1] - hidden[block])), abs=1e-4)
    heads = sum(r["contribution"] for r in rows if r["kind"] == "head")
    attn = sum(r["contribution"] for r in rows if r["kind"] == "attn")
    assert heads == pytest.approx(attn, abs=1e-4)  # no projection bias in a Llama


def test_the_attribution_reads_where_the_answers_first_differ(answers_ten):
    loaded = load_model(str(answers_ten), progress=False)
    model, tok = loaded.model, loaded.tokenizer
    settings = PromptSettings(L=14, counts=[1, 3, 10, 11, 12], per_count=1, pairs=[["a", "b"]], configs=["count"],
                              seeds=[0], template="plain")
    config = ComponentsConfig(model=ModelSpec(str(answers_ten)), prompts=settings, batch_size=3, ablate_prompts=0)
    result = run_components(config, loaded=loaded)
    prompts = build_prompts(tok, settings)
    ten = answer_token_ids(tok, 10, "plain")
    space, one, zero = ten
    assert [p["answer"] for p in result.prompts] == [10] * len(prompts)
    by = {}
    for r in result.rows:
        by.setdefault((r["prompt_id"], r["target"]), []).append(r)
    checked = 0
    for i, p in enumerate(prompts):
        rec = result.prompts[i]
        correct = answer_token_ids(tok, p.n, "plain")
        previous = answer_token_ids(tok, p.n - 1, "plain")
        # where the greedy " 10" departs from the correct answer (" 10" itself departs nowhere: zero at the boundary;
        # " 1" is all of it and the model goes on with "0": no one token stands for " 1" there, no `answer`)
        want_answer = {1: None, 3: (1, one), 10: (0, space), 11: (2, zero), 12: (2, zero)}[p.n]
        want_previous = {1: 1, 3: 1, 10: 1, 11: 2, 12: 2}[p.n]  # " 3"/" 2", " 10"/" 9": the digit; " 11"/" 10": 2
        assert rec["answer_position"] == (None if want_answer is None else want_answer[0]), p.n
        assert rec["previous_position"] == want_previous, p.n
        reads = [("previous", (want_previous, correct[want_previous], previous[want_previous]))]
        if want_answer is None:
            assert (i, "answer") not in by and rec["ld_answer"] is None and rec["answer_token"] is None
        else:
            reads.append(("answer", (want_answer[0], correct[want_answer[0]], want_answer[1])))
        for target, (j, a, b) in reads:
            # the shared prefix teacher-forced
            assert_read_by_hand(model, by[(i, target)], rec[f"ld_{target}"], p.ids + correct[:j], a, b)
            checked += 1
    # the case: correct " 11", the model's " 10": read at the second digit, not zero, components included
    eleven = next(i for i, p in enumerate(prompts) if p.n == 11)
    rows = by[(eleven, "answer")]
    assert result.prompts[eleven]["correct_token"] == "1" and result.prompts[eleven]["answer_token"] == "0"
    assert abs(rows[0]["total"]) > 1.0
    assert any(abs(r["contribution"]) > 1e-4 for r in rows if r["kind"] in ("attn", "mlp", "head"))
    # the model's own correct answer departs nowhere: the same token twice, exactly zero
    tenth = next(i for i, p in enumerate(prompts) if p.n == 10)
    assert all(r["contribution"] == 0.0 and r["total"] == 0.0 for r in by[(tenth, "answer")])
    assert checked == 2 * len(prompts) - 1


def capture(folder, out, counts, per_count=2, L=10):
    from countlens.llm import CaptureConfig, run_capture

    config = CaptureConfig().with_options(model=str(folder), L=L, counts=list(counts), per_count=per_count,
                                          pairs=[["a", "b"]], configs=["count"], seeds=[0], template="plain")
    run_capture(config, out, progress=False)
    return config


def test_the_lens_reads_after_the_shared_space_token(tiny_model_dir, tmp_path):  # noqa: F811
    from countlens.llm.lens.experiment import LensConfig, LensResult, run_lens

    config = capture(tiny_model_dir, tmp_path / "acts", range(10))
    result = run_lens(LensConfig(acts=str(tmp_path / "acts"), baseline_directions=20))
    loaded = load_model(str(tiny_model_dir), progress=False)
    model, tok = loaded.model, loaded.tokenizer
    space = tok(" 1", add_special_tokens=False)["input_ids"][0]
    assert result.read_at == {"answer_position": 1, "prefix": [space], "prefix_text": " "}
    assert [t["text"] for t in result.number_tokens] == [str(k) for k in range(10)]
    assert LensResult.from_dict(result.to_dict()).read_at == result.read_at
    from countlens.core.capture import open_capture

    texts = open_capture(tmp_path / "acts").column("prompt")  # the capture's rows are in its own order
    prompts = {p.prompt: p for p in build_prompts(tok, config.prompts)}
    w_u = model.get_output_embeddings().weight.detach().double()
    L = model.config.num_hidden_layers
    checked = 0
    for r in (r for r in result.rows if r["lens"] == "logit"):
        p = prompts[str(texts[r["row"]])]
        assert p.n == r["n"]
        digit = answer_token_ids(tok, p.n, "plain")[1]
        logits, _, hidden = direct(model, p.ids + [space])  # the space teacher-forced
        loc = r["location_index"]
        if loc == L:  # the last location is the model's own next-token logits
            row = torch.as_tensor(logits)
        else:
            with torch.no_grad():
                normed = model.model.norm(torch.as_tensor(hidden[loc], dtype=torch.float32)[None])[0].double()
            row = normed @ w_u.T
        assert r["logprob"] == pytest.approx(float(torch.log_softmax(row, -1)[digit]), abs=1e-4), (loc, p.n)
        checked += 1
    assert checked == result.split["n_test"] * (L + 1) > 0  # the test prompts at every location


def test_answers_no_one_token_tells_apart_are_refused_in_one_line(tiny_model_dir, tmp_path, capsys,  # noqa: F811
                                                                  monkeypatch):
    import countlens.llm.steering.experiment as steering
    from countlens.llm.answers import candidate_token_ids
    from countlens.llm.lens.readout import first_tokens
    from tests.helpers.cli import assert_one_line_error, run_countlens

    loaded = load_model(str(tiny_model_dir), progress=False)
    # " 1", " 10", " 11": every answer begins with " 1", and " 1" ends there
    with pytest.raises(ConfigError) as err:
        first_tokens(candidate_token_ids(loaded.tokenizer, [1, 10, 11], "plain"), [1, 10, 11], 10 ** 6)
    assert err.value.field == "counts" and "answer position 2" in str(err.value)
    capture(tiny_model_dir, tmp_path / "acts", [1, 10, 11], per_count=2, L=12)
    monkeypatch.setattr(steering, "capture_model", lambda *a, **k: pytest.fail("the model loaded"))
    code, _, stderr = run_countlens(capsys, "llm", "lens", "--acts", str(tmp_path / "acts"), "--counts", "1,10,11",
                                    "--out", str(tmp_path / "out"))
    assert_one_line_error(code, stderr, "--counts", "the answer 1", "ends where the others go on")
    assert "template" not in stderr  # no option this model may not have
    assert not (tmp_path / "out").exists()


def test_attribution_patchings_metric_reads_every_answer_token(answers_ten):
    """AtP's (and activation patching's) metric is the final answers' logit difference, every answer token
    teacher-forced (docs/definitions.md §2.9): " 11" against " 10", sharing " 1", is read at the second digit with
    no change, and equals the direct computation from plain forwards."""
    from countlens.llm.answers import number_continuations
    from countlens.llm.attribution.atp import gradient_pass
    from countlens.llm.hooks import hook_sites

    loaded = load_model(str(answers_ten), progress=False)
    model, tok = loaded.model, loaded.tokenizer
    settings = PromptSettings(L=14, counts=[11], per_count=1, pairs=[["a", "b"]], configs=["count"], seeds=[0],
                              template="plain")
    [p] = build_prompts(tok, settings)
    eleven, ten = answer_token_ids(tok, 11, "plain"), answer_token_ids(tok, 10, "plain")
    assert divergence([eleven, ten]).position == 2
    cont = number_continuations(tok)

    def final(tokens):  # log p(tokens) + log p(no digit next), plain forwards, float64
        logp = 0.0
        for j, t in enumerate(tokens):
            logp += float(torch.log_softmax(torch.as_tensor(direct(model, p.ids + tokens[:j])[0]), -1)[t])
        last = torch.log_softmax(torch.as_tensor(direct(model, p.ids + tokens)[0]), -1)
        stop = np.ones(len(last), dtype=bool)
        stop[cont] = False
        return logp + float(torch.logsumexp(last[torch.as_tensor(stop)], -1))  # 1 − p(digit), without cancelling

    gp = gradient_pass(model, p.ids, p.ids, [eleven, ten], {"resid": hook_sites([1], model.config.num_hidden_layers)})
    want = final(eleven) - final(ten)
    assert abs(want) > 1.0 and gp.ld == pytest.approx(want, abs=1e-3)
    assert np.abs(gp.grad["resid"]).max() > 0


def test_the_components_command_runs_on_a_base_model_whose_answers_share_a_space(answers_ten, tmp_path, capsys):
    """The issue's refusal ("every answer of --counts starts with the same token ... use --template chat") is gone:
    the command reads after the shared tokens and says so in its line."""
    from countlens.llm.components.experiment import ComponentsResult
    from tests.helpers.cli import run_countlens

    code, out, err = run_countlens(capsys, "llm", "components", "--model", str(answers_ten), "--template", "plain",
                                   "--counts", "1,10:12", "--L", "14", "--pairs", "a/b", "--seeds", "0",
                                   "--ablate-prompts", "0", "--quiet", "--out", str(tmp_path / "out"))
    assert code == 0, err
    result = ComponentsResult.read(tmp_path / "out")
    later = sum((p["answer_position"] or 0) > 0 for p in result.prompts)
    assert later > 0 and f"{later} read past the answer's first token" in out
    ones = sum(p["n"] == 1 for p in result.prompts)  # " 1", answered " 10": no `answer` read
    assert ones and [p["answer_position"] for p in result.prompts if p["n"] == 1] == [None] * ones
    assert f"{ones} go on past the whole correct answer" in out
    assert {p["previous_position"] for p in result.prompts} == {1, 2}  # " 10"/" 9": 1; " 11"/" 10", " 12"/" 11": 2
