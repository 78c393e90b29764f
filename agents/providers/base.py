"""The provider seam: one base class, one module per provider, a lazy `get_provider(name)`."""

from __future__ import annotations

from abc import ABC, abstractmethod

from agents.engine.types import ModelReply, ModelRequest


class ProviderConfigError(ValueError):
    """A provider cannot be used as asked (unknown, no key, model not allowed): a client error."""


class Provider(ABC):
    """A model behind one provider's API. Instances are cheap; SDK clients are cached by the subclass."""

    name: str = ""
    default_model: str = ""
    # Whether its models take images in a run's input (docs/api.md#images-on-a-run); AGENT_VISION_MODELS_<NAME>,
    # when set, names the models that do instead (agents.providers.accepts_images).
    vision: bool = False
    # Whether its models take documents (PDF and plain text, docs/documents.md); AGENT_DOCUMENT_MODELS_<NAME>, when
    # set, names the models that do instead (agents.providers.accepts_documents).
    documents: bool = False

    def __init__(self, model: str | None = None) -> None:
        self.model = model or self.default_model

    @classmethod
    def check_config(cls) -> None:
        """Raise ProviderConfigError when the provider cannot be used (e.g. a missing key)."""
        return None

    @abstractmethod
    def complete(self, request: ModelRequest) -> ModelReply:
        """One model call; raise engine ModelError with a safe message on failure."""
