"""The README's `ratomic serve` examples stay true: its ratelimit.yaml is
served, and its Envoy configuration parses as Envoy's own protos."""

import pathlib
import re

import yaml
from google.protobuf import json_format

# The typed configs the Envoy example names must be registered to parse.
from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.extensions.filters.http.ratelimit.v3 import rate_limit_pb2  # noqa: F401
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2  # noqa: F401
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401

from conftest import OK, UNIT, descriptor, request

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"


def block(name):
    text = README.read_text()
    m = re.search(r"<!-- serve: " + re.escape(name) + r" .*?-->\n```yaml\n(.*?)```", text, re.S)
    assert m, f"no {name} block in the README"
    return m.group(1)


def test_the_readme_configuration_is_served_as_it_says(serve):
    s = serve(block("ratelimit.yaml"))
    r = s.call(request("api", descriptor(("remote_address", "10.0.0.9"))))
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 2**32 - 1
    r = s.call(request("api", descriptor(("remote_address", "10.0.0.1"))))
    assert r.statuses[0].current_limit.requests_per_unit == 50 and r.statuses[0].current_limit.unit == UNIT.SECOND
    r = s.call(request("api", descriptor(("generic_key", "checkout"), ("user", "42"))))
    assert r.statuses[0].current_limit.requests_per_unit == 10 and r.statuses[0].current_limit.unit == UNIT.MINUTE


def test_the_readme_envoy_configuration_is_envoys():
    bootstrap = json_format.ParseDict(yaml.safe_load(block("envoy.yaml")), bootstrap_pb2.Bootstrap())
    hcm_any = bootstrap.static_resources.listeners[0].filter_chains[0].filters[0].typed_config
    hcm = http_connection_manager_pb2.HttpConnectionManager()
    assert hcm_any.Unpack(hcm)
    rl = rate_limit_pb2.RateLimit()
    assert hcm.http_filters[0].typed_config.Unpack(rl)
    assert rl.domain == "api"
    assert rl.rate_limit_service.grpc_service.envoy_grpc.cluster_name == "ratomic"
    cluster = bootstrap.static_resources.clusters[0]
    assert cluster.name == "ratomic"
    address = cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    # The cluster points at `ratomic serve`'s default gRPC address.
    assert (address.address, address.port_value) == ("127.0.0.1", 8081)
    # The domain the filter sends is the one the README's configuration serves.
    assert yaml.safe_load(block("ratelimit.yaml"))["domain"] == rl.domain
