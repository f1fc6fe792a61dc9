"""TRL's ``environment_factory`` on the built-in tool-calling rollout (``rollout.kwargs.environment_factory``): an
environment's public methods are the tools of one episode (:mod:`.environment_factory`, a tool source)."""

from . import environment_factory  # noqa: F401 - registers the tool source
