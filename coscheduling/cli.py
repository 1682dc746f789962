"""coscheduling: an all-or-nothing gang scheduler for Kubernetes.

Run it against a cluster (run, or serve for a caller that binds), ask why a gang waits
(explain), show or check its configuration (config), start a local control plane
(localcluster), and call its gRPC server (call). Credentials are found as kubectl finds
them: --kubeconfig, $KUBECONFIG, ~/.kube/config, then the in-cluster service account.
See also the kubectl plugin: kubectl gang list|explain|whatif.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import yaml

from coscheduling.cluster.client import ApiError
from coscheduling.cluster.kubeconfig import CredentialsError
from coscheduling.config import ConfigError
from coscheduling.config.load import dump_defaults
from coscheduling.service.process import load_config


def _run(args: argparse.Namespace) -> int:
    from coscheduling.server.commands import run_service

    return run_service(args, command="run", loop=True)


def _explain(args: argparse.Namespace) -> int:
    from coscheduling.cluster.client import ClientSettings, KubeClient
    from coscheduling.cluster.kubeconfig import context_namespace, kubectl_kubeconfig
    from coscheduling.commands.explain import explain

    kubeconfig = kubectl_kubeconfig(args.kubeconfig or "")
    namespace, sep, name = args.group.rpartition("/")
    if not sep:
        namespace, name = args.namespace or context_namespace(
            kubeconfig, args.context or "") or "default", args.group
    if not namespace or not name:
        print("coscheduling explain: give the group as NAMESPACE/NAME (or NAME with -n)",
              file=sys.stderr)
        return 2
    client = KubeClient(ClientSettings(kubeconfig=kubeconfig, context=args.context or ""))
    print(explain(client, namespace, name))
    return 0


def _config(args: argparse.Namespace) -> int:
    if args.action == "defaults":
        print(yaml.safe_dump(dump_defaults(), sort_keys=False), end="")
        return 0
    load_config(args.file)
    print(f"{args.file}: valid")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coscheduling", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the scheduler against a cluster")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: the config file's, else "
                     "$KUBECONFIG, ~/.kube/config, then the in-cluster service account)")
    run.add_argument("--config", help="SchedulerConfiguration YAML file (default: built-in)")
    run.add_argument("-v", type=int, default=0, help="log verbosity (0 info, 1+ debug)")
    run.add_argument("--log-format", choices=("text", "json"), default="text")
    run.add_argument("--no-grpc", action="store_true",
                     help="do not serve the extension points over gRPC")
    from coscheduling.server.commands import add_server_flags

    add_server_flags(run)
    run.set_defaults(func=_run)

    explain = sub.add_parser("explain", help="why a PodGroup is where it is")
    explain.add_argument("group", help="NAMESPACE/NAME, or NAME with -n")
    explain.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, "
                         "~/.kube/config, then the in-cluster service account)")
    explain.add_argument("--context", help="the kubeconfig context to use")
    explain.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    explain.set_defaults(func=_explain)

    config = sub.add_parser("config", help="show the defaults or validate a config file")
    config.add_argument("action", choices=("defaults", "validate"))
    config.add_argument("file", nargs="?")
    config.set_defaults(func=_config)

    try:
        from coscheduling.localcluster import commands as localcluster_commands
    except ImportError:  # pragma: no cover - the launcher ships with the package
        pass
    else:
        localcluster_commands.add_parser(sub)
    from coscheduling.server import commands as server_commands

    server_commands.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "config" and args.action == "validate" and not args.file:
        parser.error("config validate needs a FILE")
    try:
        code: int = args.func(args)
    except ConfigError as err:
        print(f"coscheduling: invalid configuration: {err}", file=sys.stderr)
        return 2
    except (ApiError, CredentialsError) as err:
        print(f"coscheduling: {err}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
