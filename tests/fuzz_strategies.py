"""Hypothesis strategies for fuzzing the server routes and configs (shared by the tests, importable by hand)."""

from __future__ import annotations

from hypothesis import strategies as st

JUNK = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
                 st.floats(allow_nan=False), st.text(max_size=12), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))

TOKEN_IDS = st.lists(st.one_of(st.integers(min_value=0, max_value=49151), st.integers(), st.booleans()),
                     max_size=40) | st.lists(st.integers(min_value=0, max_value=10), min_size=240, max_size=300)
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool", "usr", ""]),
                           "content": st.text(max_size=30)}),
    st.dictionaries(st.sampled_from(["role", "content", "name", "x"]), JUNK, max_size=3),
    JUNK)
PROMPT = st.one_of(st.text(max_size=60), TOKEN_IDS, st.lists(MESSAGE, max_size=3), JUNK)

#: Valid, cheap bodies of POST /generate/ (n <= 3, max_tokens <= 4).
VALID_GENERATE = st.fixed_dictionaries({
    "prompts": st.lists(st.one_of(st.text(min_size=1, max_size=40),
                                  st.lists(st.integers(min_value=0, max_value=49151), min_size=1, max_size=30),
                                  st.lists(st.fixed_dictionaries({"role": st.just("user"),
                                                                  "content": st.text(max_size=30)}),
                                           min_size=1, max_size=2)), min_size=1, max_size=3),
    "n": st.integers(min_value=1, max_value=3),
    "max_tokens": st.integers(min_value=1, max_value=4),
}, optional={
    "temperature": st.floats(min_value=0.0, max_value=3.0),
    "top_p": st.floats(min_value=0.01, max_value=1.0),
    "top_k": st.sampled_from([-1, 0, 1, 5, 49152, 10 ** 6]),
    "min_p": st.floats(min_value=0.0, max_value=1.0),
    "repetition_penalty": st.floats(min_value=0.01, max_value=100.0),
    "seed": st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1),
    "stop": st.lists(st.text(min_size=1, max_size=4), max_size=3),
})

#: Bodies of POST /generate/: real keys with values that are cheap when valid (n <= 3, max_tokens <= 4) and every
#: kind of invalid (huge, negative, wrong type), plus unknown keys.
WILD_GENERATE = st.fixed_dictionaries({}, optional={
    "prompts": st.one_of(st.lists(PROMPT, max_size=4), JUNK),
    "n": st.one_of(st.integers(min_value=1, max_value=3), st.sampled_from([0, -1, 10 ** 6, 2 ** 64]), JUNK),
    "temperature": st.one_of(st.floats(min_value=0.0, max_value=2.0), st.floats(), JUNK),
    "top_p": st.one_of(st.floats(min_value=0.01, max_value=1.0), st.floats(), JUNK),
    "top_k": st.one_of(st.sampled_from([-1, 0, 1, 5, 49152, 10 ** 6, -2, 2 ** 40]), JUNK),
    "min_p": st.one_of(st.floats(min_value=0.0, max_value=1.0), st.floats(), JUNK),
    "max_tokens": st.one_of(st.integers(min_value=1, max_value=4), st.sampled_from([0, -5, 10 ** 9, 2 ** 64]), JUNK),
    "repetition_penalty": st.one_of(st.floats(min_value=0.5, max_value=2.0), st.floats(), JUNK),
    "seed": st.one_of(st.integers(min_value=-(2 ** 70), max_value=2 ** 70), JUNK),
    "stop": st.one_of(st.lists(st.text(max_size=4), max_size=3), JUNK),
    "extra_key": JUNK,
})


@st.composite
def _one_field_off(draw):
    body = draw(VALID_GENERATE)
    wild = draw(WILD_GENERATE.filter(bool))
    key = draw(st.sampled_from(sorted(wild)))
    body[key] = wild[key]
    return body


#: Mostly valid bodies, valid bodies with one field replaced by anything, and anything.
GENERATE_BODY = st.one_of(VALID_GENERATE, _one_field_off(), WILD_GENERATE)


#: Values a config key might be given by mistake: every YAML type, extremes, and out-of-range numbers.
CONFIG_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2 ** 64), max_value=2 ** 64),
    st.sampled_from([0, -1, 1, 10 ** 30, 0.0, -0.5, 1e300, float("inf"), float("-inf"), float("nan")]),
    st.floats(), st.text(max_size=20), st.sampled_from(["", "off", "1e5", "${sampling.num_generations}", "${nope}",
                                                        "${oc.env:NO_SUCH_VAR_HERE}", "a:b", "x.py:f"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=6), st.integers(), max_size=2))


def _paths(node, prefix=()):
    """Every path into a nested dict/list config (mappings, list items and leaves)."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, prefix + (i,))


def _parent(tree, path):
    for part in path[:-1]:
        tree = tree[part]
    return tree


@st.composite
def mutated(draw, config):
    """``config`` (a dict from YAML) with 1-3 mutations: a key deleted, a value replaced by anything, an unknown key
    added, a whole section replaced."""
    import copy

    tree = copy.deepcopy(config)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(tree) if p]
        op = draw(st.sampled_from(["delete", "replace", "unknown", "replace"]))
        if op == "unknown" or not paths:
            containers = [p for p in _paths(tree) if isinstance(_parent(tree, p + ("x",)), dict)]
            where = _parent(tree, draw(st.sampled_from(containers)) + ("x",))
            where[draw(st.sampled_from(["temprature", "max_step", "lr", "extra", "n", "tools", "kwargs"]))] = \
                draw(CONFIG_VALUE)
            continue
        path = draw(st.sampled_from(paths))
        parent = _parent(tree, path)
        if op == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(CONFIG_VALUE)
    return tree
