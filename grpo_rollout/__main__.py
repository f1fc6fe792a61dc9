"""``python -m grpo_rollout ...``: the same commands as ``grpo-rollout``; the form torchrun starts, one per process::

    torchrun --nproc-per-node 2 -m grpo_rollout train configs/quickstart.yaml
"""

from .cli.main import main

if __name__ == "__main__":
    main()
