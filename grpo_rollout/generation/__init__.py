"""Generation: the client interface rollouts call, its transformers and vLLM backends, spawning or attaching to
servers, weight sync, and the server routes (``server/``)."""
