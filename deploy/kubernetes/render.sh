#!/usr/bin/env bash
# Renders the Helm chart (deploy/helm/netaccel) into plain manifests for namespace
# netaccel, with the chart's defaults: netaccel.yaml. The Kubernetes tests check that
# netaccel.yaml is this render and that the API server accepts it.
#
#   deploy/kubernetes/render.sh [HELM]     # HELM: the helm binary (default: helm on PATH)
set -euo pipefail
cd "$(dirname "$0")"
helm=${1:-helm}
{
  echo "# Rendered from deploy/helm/netaccel by deploy/kubernetes/render.sh: do not edit."
  echo "# kubectl create namespace netaccel && kubectl apply -n netaccel -f netaccel.yaml"
  "$helm" template netaccel ../helm/netaccel --namespace netaccel --kube-version 1.34.2
} > netaccel.yaml
