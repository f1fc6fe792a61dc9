"""Two complete rollouts written against the ``client`` interface (docs/rollouts.md, "The generation client").

``rollout`` samples every prompt in one batched ``client.generate`` call; ``async_rollout`` does the same with one
``await client.agenerate`` per prompt, run concurrently (the shape a multi-turn rollout takes, where each sample
goes its own way). Both return the finish reason as an extra, which every reward function can take as a parameter.
Train with either: ``rollout.function: examples/client_rollout/rollout.py:rollout`` (or ``:async_rollout``).
"""

import asyncio


def rollout(prompts, client, n, temperature, top_p, top_k, max_completion_length, seed, **kwargs):
    # the parameter named `client` is what makes the trainer pass the generation backend (vLLM or transformers)
    prompt_ids = client.encode_prompts(prompts)  # chat messages get the chat template; text is tokenized as it is
    result = client.generate(prompt_ids, n=n, temperature=temperature, top_p=top_p, top_k=top_k,
                             max_tokens=max_completion_length, seed=seed)
    # `result` is a GenerationResult: read its attributes (it is not a dict)
    #   result.prompt_ids      P lists of token ids, as sent (cut to sampling.max_prompt_length)
    #   result.completion_ids  P × n lists of token ids, grouped by prompt
    #   result.logprobs        P × n lists: the sampler's log-prob of each sampled token, in nats
    #   result.finish_reasons  P × n strings: "stop" (end of sequence) or "length" (hit max_tokens)
    #   result.weight_version  the server's weight version when it started the request (None: transformers)
    #   result.weight_version_end  ... and when it finished (newer if a weight sync landed in flight)
    return {"prompt_ids": result.prompt_ids, "completion_ids": result.completion_ids,
            "logprobs": result.logprobs, "finish_reason": result.finish_reasons}


async def async_rollout(prompts, client, n, temperature, top_p, top_k, max_completion_length, seed, **kwargs):
    async def sample(prompt_ids):  # one prompt's n completions
        return await client.agenerate([prompt_ids], n=n, temperature=temperature, top_p=top_p, top_k=top_k,
                                      max_tokens=max_completion_length, seed=seed)

    results = await asyncio.gather(*(sample(ids) for ids in client.encode_prompts(prompts)))
    return {"prompt_ids": [r.prompt_ids[0] for r in results],
            "completion_ids": [c for r in results for c in r.completion_ids],
            "logprobs": [lp for r in results for lp in r.logprobs],
            "finish_reason": [f for r in results for f in r.finish_reasons]}


def stopped(finish_reason, **kwargs):
    """A reward taking the rollout's extra: 1 for a completion that ended by itself, 0 for one cut at the budget."""
    return [1.0 if reason == "stop" else 0.0 for reason in finish_reason]
