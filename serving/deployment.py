"""The policy as a Ray Serve deployment: vLLM engine replicas, an OpenAI-compatible HTTP route, and weight
updates broadcast to every replica.

Weight updates go through a small named actor, the ``WeightRegistry``: the learner puts the new
``{name: numpy array}`` into the object store and publishes (version, reference); every replica follows
the registry in the background, loads each new version in place (``PolicyEngine.update_weights``) and
acknowledges it; ``Policy.update_weights`` returns once all replicas have. A replica that starts later
(or restarts) loads the latest published version before it serves.

A second, frozen deployment of the initial checkpoint (the "base" model) is the same deployment with
``follow_updates=False`` under another name and route.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from ray import serve

from serving.engine import PolicyEngine, PromptTooLong
from serving.openai_api import (
    APIError,
    ChatRequest,
    CompletionRequest,
    chat_response,
    completion_response,
    models_response,
)
from serving.settings import SamplingConfig, ServingConfig

log = logging.getLogger(__name__)
NAMESPACE = "envengineer"  # of the named weight registries
api = FastAPI(title="envengineer policy")


@ray.remote(num_cpus=0)
class WeightRegistry:
    """Latest published weights (version, object reference) and which replicas have loaded which version."""

    def __init__(self):
        self.version = 0
        self.weights: list[ray.ObjectRef] = []
        self.loaded: dict[str, int] = {}
        self.changed = asyncio.Condition()

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def publish(self, version: int, weights: list[ray.ObjectRef]) -> None:
        if version <= self.version:
            raise ValueError(f"version {version} is not newer than the published {self.version}")
        self.version, self.weights = version, weights
        await self._notify()

    async def newer_than(self, version: int, timeout_s: float = 30.0) -> tuple[int, list[ray.ObjectRef]] | None:
        """The latest version if newer than ``version``, waiting up to ``timeout_s`` for one."""
        if self.version <= version:
            if timeout_s <= 0:
                return None
            async with self.changed:
                try:
                    await asyncio.wait_for(self.changed.wait_for(lambda: self.version > version), timeout_s)
                except TimeoutError:
                    return None
        return self.version, self.weights

    async def acknowledge(self, replica: str, version: int) -> None:
        self.loaded[replica] = version
        await self._notify()

    async def forget(self, replica: str) -> None:
        self.loaded.pop(replica, None)
        await self._notify()

    async def wait_loaded(self, version: int, replicas: int, timeout_s: float) -> bool:
        """True once ``replicas`` replicas have loaded ``version`` (or newer)."""
        async with self.changed:
            try:
                await asyncio.wait_for(
                    self.changed.wait_for(lambda: sum(v >= version for v in self.loaded.values()) >= replicas),
                    timeout_s,
                )
            except TimeoutError:
                return False
        return True


def _error(error: Exception) -> JSONResponse:
    if isinstance(error, APIError):
        return JSONResponse(error.body(), status_code=error.status)
    if isinstance(error, ValidationError):
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        return JSONResponse(APIError(400, problems).body(), status_code=400)
    if isinstance(error, PromptTooLong):
        return JSONResponse(APIError(400, str(error), param="prompt").body(), status_code=400)
    log.exception("request failed")
    return JSONResponse(APIError(500, f"{type(error).__name__}: {error}", "server_error").body(), status_code=500)


def as_sampling(sampling: SamplingConfig | dict | None) -> SamplingConfig:
    """A request's sampling settings: as given, or validated from a plain mapping (callers outside Python
    objects, such as benchmarks sending JSON-like dicts)."""
    return sampling if isinstance(sampling, SamplingConfig) else SamplingConfig.model_validate(sampling or {})


@serve.deployment
@serve.ingress(api)
class PolicyDeployment:
    async def __init__(self, config: ServingConfig, registry_name: str | None = None):
        self.config = config
        self.engine = PolicyEngine(self.config)
        self.registry_name = registry_name
        self.registry = ray.get_actor(registry_name, namespace=NAMESPACE) if registry_name else None
        self._follower: asyncio.Task | None = None
        if self.registry is not None:
            self.replica_id = serve.get_replica_context().replica_tag
            await self._sync(wait_s=0.0)  # the latest published weights, before serving anything
            self._follower = asyncio.get_running_loop().create_task(self._follow())

    async def _sync(self, wait_s: float) -> None:
        """Load the registry's newest weights if newer than ours (waiting up to ``wait_s``), and say so."""
        update = await self.registry.newer_than.remote(self.engine.version, wait_s)
        if update is not None:
            version, (weights_ref,) = update
            await self.engine.update_weights(await weights_ref, version)
        await self.registry.acknowledge.remote(self.replica_id, self.engine.version)

    async def _follow(self) -> None:
        while True:
            try:
                await self._sync(wait_s=30.0)
            except asyncio.CancelledError:
                raise
            except ray.exceptions.RayActorError:  # the registry was replaced (a redeploy): follow the new one
                await asyncio.sleep(1.0)
                try:
                    self.registry = ray.get_actor(self.registry_name, namespace=NAMESPACE)
                except ValueError:
                    pass
            except Exception:  # keep serving and following; the learner's wait_loaded times out if this persists
                log.exception("weight update failed")
                await asyncio.sleep(1.0)

    # ------------------------------------------------------------------------------------------
    # Methods for Ray callers (rollout workers, validator, engineer) through a DeploymentHandle.

    async def generate(
        self,
        prompts: list[str] | list[list[int]],
        sampling: SamplingConfig | dict | None = None,
        json_schema: dict | None = None,
    ) -> list[dict]:
        return await self.engine.generate(prompts, as_sampling(sampling), json_schema)

    async def generate_chat(
        self,
        conversations: list[list[dict[str, str]]],
        sampling: SamplingConfig | dict | None = None,
        json_schema: dict | None = None,
    ) -> list[dict]:
        prompts = [self.engine.chat_prompt(messages) for messages in conversations]
        return await self.engine.generate(prompts, as_sampling(sampling), json_schema)

    async def weight_version(self) -> int:
        return self.engine.version

    # ------------------------------------------------------------------------------------------
    # OpenAI-compatible HTTP route.

    def _check_model(self, name: str) -> None:
        if name != self.config.served_name:
            raise APIError(
                404, f"model {name!r} not found; this server serves {self.config.served_name!r}", param="model"
            )

    @api.get("/v1/models")
    async def list_models(self) -> dict:
        return models_response(self.config.served_name)

    @api.post("/v1/completions")
    async def completions(self, request: Request):
        try:
            body = CompletionRequest.model_validate(await request.json())
            self._check_model(body.model)
            prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
            results = await self.engine.generate(prompts, body.sampling())
            return completion_response(self.config.served_name, results)
        except Exception as error:  # every failure becomes an OpenAI-shaped error; the replica keeps serving
            return _error(error)

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request):
        try:
            body = ChatRequest.model_validate(await request.json())
            self._check_model(body.model)
            schema = body.response_format.schema_or_none() if body.response_format else None
            prompt = self.engine.chat_prompt([m.model_dump() for m in body.messages])
            (result,) = await self.engine.generate([prompt], body.sampling(), schema)
            return chat_response(self.config.served_name, result)
        except Exception as error:
            return _error(error)


@dataclass
class Policy:
    """A deployed policy: the Serve handle, its weight registry (None when frozen) and its settings."""

    name: str
    config: ServingConfig
    handle: Any
    registry: Any | None

    def generate(self, prompts: list[str], sampling: SamplingConfig | None = None, json_schema: dict | None = None):
        return self.handle.generate.remote(prompts, sampling or SamplingConfig(), json_schema).result()

    def weight_version(self) -> int:
        return self.handle.weight_version.remote().result()

    def update_weights(self, arrays: dict[str, np.ndarray], version: int, timeout_s: float = 600.0) -> int:
        """Publish new weights and wait until every replica serves them; returns ``version``."""
        if self.registry is None:
            raise RuntimeError(f"deployment {self.name!r} is frozen")
        return publish_weights(self.registry, arrays, version, self.config.num_replicas, timeout_s)


def generate_chat(
    handle, conversations: list, sampling: SamplingConfig | dict, json_schema: dict | None = None, attempts: int = 3
):
    """``generate_chat`` through a Serve handle, surviving a replica that dies under the request: Serve
    starts a new replica (which loads the newest published weights before it serves) and the request goes
    again with the same arguments and seed, so the answer is the one the dead replica would have given."""
    for attempt in range(1, attempts + 1):
        try:
            return handle.generate_chat.remote(conversations, sampling, json_schema).result()
        except ray.exceptions.RayActorError as error:
            if attempt == attempts:
                raise
            log.warning("replica died under a request (%s); sending it again", type(error).__name__)


def registry_name_of(deployment: str) -> str:
    return f"{deployment}-weights"


def get_registry(name: str):
    """The weight registry actor of a deployment, by the registry's name."""
    return ray.get_actor(name, namespace=NAMESPACE)


def publish_weights(registry, arrays: dict[str, np.ndarray], version: int, replicas: int, timeout_s: float) -> int:
    """Publish weights and wait until ``replicas`` replicas serve them; returns ``version``. The caller
    owns the object: a replica that starts after the caller has gone waits for the next publication."""
    ray.get(registry.publish.remote(version, [ray.put(arrays)]))
    if not ray.get(registry.wait_loaded.remote(version, replicas, timeout_s)):
        raise TimeoutError(f"not every replica loaded weights version {version} within {timeout_s} s")
    return version


def deploy(config: ServingConfig, name: str = "policy", route_prefix: str = "/", follow_updates: bool = True) -> Policy:
    """Start (or replace) the Serve application ``name`` serving ``config.model`` at ``route_prefix``."""
    from serving.engine import cuda_available

    registry = None
    registry_name = None
    if follow_updates:
        registry_name = registry_name_of(name)
        _kill_registry(registry_name)
        # detached: it lives as long as the Serve application (``undeploy`` ends both), not the caller
        registry = WeightRegistry.options(name=registry_name, namespace=NAMESPACE, lifetime="detached").remote()
    env_vars = {} if cuda_available() else config.cpu_environment()
    app = PolicyDeployment.options(
        name=name,
        num_replicas=config.num_replicas,
        max_ongoing_requests=config.max_ongoing_requests,
        max_queued_requests=config.max_queued_requests,
        ray_actor_options={
            "num_cpus": config.num_cpus,
            "num_gpus": config.num_gpus,
            "runtime_env": {"env_vars": env_vars},
        },
    ).bind(config, registry_name)
    handle = serve.run(app, name=name, route_prefix=route_prefix)
    return Policy(name, config, handle, registry)


def _kill_registry(registry_name: str) -> None:
    try:
        ray.kill(get_registry(registry_name))
    except ValueError:
        pass


def undeploy(name: str = "policy") -> None:
    """Delete the Serve application ``name`` and its weight registry."""
    serve.delete(name)
    _kill_registry(registry_name_of(name))


def start_serve(host: str = "127.0.0.1", port: int = 8000) -> bool:
    """Start Serve's HTTP proxy (loopback by default) on an initialised Ray; a Serve already running on
    the cluster is kept as it is (False)."""
    try:
        ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
        return False
    except ValueError:
        serve.start(http_options={"host": host, "port": port})
        return True
