{{/* Names: KubeRay caps RayService names at 47 characters; leave room for suffixes. */}}
{{- define "pdserve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" }}
{{- end }}

{{- define "pdserve.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The Service KubeRay creates for the Serve proxies (spec.serveService). */}}
{{- define "pdserve.routerServiceName" -}}
{{- printf "%s-router" (include "pdserve.fullname" .) }}
{{- end }}

{{- define "pdserve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pdserve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "pdserve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "pdserve.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "pdserve.image" -}}
{{- printf "%s:%s" .Values.image.repository (default (printf "%s-gpu" .Chart.AppVersion) .Values.image.tag) }}
{{- end }}

{{/* pdserve.router with pydantic's defaults (pdserve/config.py RouterConfig). */}}
{{- define "pdserve.routerPort" -}}
{{- $router := .Values.pdserve.router | default dict }}
{{- $router.port | default 8000 | toJson }}
{{- end }}

{{/* The ports router replicas serve their own /metrics on: one per router replica that may run
(router.autoscaling.max_replicas, else router.num_replicas), from router.metrics_port (default
router.port + 1001); RouterConfig.metrics_ports. A JSON list of numbers. */}}
{{- define "pdserve.routerMetricsPorts" -}}
{{- $router := .Values.pdserve.router | default dict }}
{{- $first := $router.metrics_port | default (add (include "pdserve.routerPort" . | atoi) 1001) | int }}
{{- $count := $router.num_replicas | default 1 | int }}
{{- with $router.autoscaling }}{{- $count = .max_replicas | default 2 | int }}{{- end }}
{{- $ports := list }}
{{- range $i := until $count }}{{- $ports = append $ports (add $first $i) }}{{- end }}
{{- $ports | toJson }}
{{- end }}

{{- define "pdserve.routerHost" -}}
{{- $router := .Values.pdserve.router | default dict }}
{{- $router.host | default "127.0.0.1" }}
{{- end }}

{{- define "pdserve.sideChannelBasePort" -}}
{{- $kv := .Values.pdserve.kv_transfer | default dict }}
{{- $kv.side_channel_base_port | default 15600 | toJson }}
{{- end }}

{{- define "pdserve.kvEventsBasePort" -}}
{{- $kv := .Values.pdserve.kv_transfer | default dict }}
{{- $kv.kv_events_base_port | default 16600 | toJson }}
{{- end }}

{{/* The Ray dashboard's port on the head (ray start --dashboard-port, default 8265). */}}
{{- define "pdserve.dashboardPort" -}}
{{- index .Values.head.rayStartParams "dashboard-port" | default 8265 | toString | atoi }}
{{- end }}

{{/*
The Ray Serve config (serveConfigV2): the same mapping as
pdserve.deploy.serve_config.serve_config_for(config); the application args ARE the pdserve config.
*/}}
{{- define "pdserve.serveConfig" -}}
{{- $pd := .Values.pdserve }}
{{- $app := dict "name" ($pd.app_name | default "pdserve") "route_prefix" "/" "import_path" "pdserve.deploy.app:build_app" "args" $pd }}
{{- $http := dict "host" (include "pdserve.routerHost" .) "port" (include "pdserve.routerPort" . | atoi) }}
{{- toYaml (dict "http_options" $http "applications" (list $app)) }}
{{- end }}

{{/* Render-time checks: refuse values that would deploy something that cannot work. */}}
{{- define "pdserve.validate" -}}
{{- if eq (.Values.pdserve.mode | default "disaggregated") "aggregated" }}
{{- fail "pdserve.mode aggregated is not deployable with this chart (it runs prefill and decode worker groups): run the aggregated baseline with `pdserve up`, or deploy mode disaggregated" }}
{{- end }}
{{- $host := include "pdserve.routerHost" . }}
{{- if has $host (list "127.0.0.1" "localhost" "::1") }}
{{- fail (printf "pdserve.router.host is %q: on Kubernetes the Serve HTTP proxies must listen on the pod network; set pdserve.router.host: 0.0.0.0" $host) }}
{{- end }}
{{- $port := include "pdserve.routerPort" . | atoi }}
{{- $dashboardPort := include "pdserve.dashboardPort" . | atoi }}
{{- if has $port (list 6379 $dashboardPort 10001 52365 (int .Values.monitoring.rayMetricsPort)) }}
{{- fail (printf "pdserve.router.port %d collides with a Ray port (6379 GCS, %d dashboard, 10001 client, 52365 dashboard agent, %v metrics): pick another" $port $dashboardPort .Values.monitoring.rayMetricsPort) }}
{{- end }}
{{- range $role := list "prefill" "decode" }}
{{- $g := index $.Values $role }}
{{- $pool := index $.Values.pdserve $role | default dict }}
{{- if gt (int $g.minReplicas) (int $g.maxReplicas) }}
{{- fail (printf "%s.minReplicas (%v) must be <= %s.maxReplicas (%v)" $role $g.minReplicas $role $g.maxReplicas) }}
{{- end }}
{{- if or (lt (int $g.replicas) (int $g.minReplicas)) (gt (int $g.replicas) (int $g.maxReplicas)) }}
{{- fail (printf "%s.replicas (%v) must lie within %s.minReplicas..maxReplicas (%v..%v)" $role $g.replicas $role $g.minReplicas $g.maxReplicas) }}
{{- end }}
{{- $numGpus := float64 ($pool.num_gpus | default 0) }}
{{- if gt $numGpus 0.0 }}
{{- if lt (float64 $g.gpusPerPod) $numGpus }}
{{- fail (printf "%s.gpusPerPod (%v) is less than pdserve.%s.num_gpus (%v): one replica must fit in one pod" $role $g.gpusPerPod $role $numGpus) }}
{{- end }}
{{- $maxServe := $pool.num_replicas | default 1 }}
{{- if $pool.autoscaling }}{{ $maxServe = $pool.autoscaling.max_replicas | default 1 }}{{ end }}
{{- $need := mulf $maxServe $numGpus }}
{{- $have := mulf $g.maxReplicas $g.gpusPerPod }}
{{- if lt $have $need }}
{{- fail (printf "the %s worker group can hold at most %v GPUs (%s.maxReplicas %v x gpusPerPod %v) but pdserve.%s needs up to %v (%v replicas x num_gpus %v): raise %s.maxReplicas or lower the pool's replicas" $role $have $role $g.maxReplicas $g.gpusPerPod $role $need $maxServe $numGpus $role) }}
{{- end }}
{{- end }}
{{- end }}
{{- $ucxEnv := (.Values.pdserve.kv_transfer | default dict).ucx_env | default dict }}
{{- if and .Values.kvTransfer.ucx.tls (hasKey $ucxEnv "UCX_TLS") }}
{{- fail "UCX_TLS is set in both kvTransfer.ucx.tls and pdserve.kv_transfer.ucx_env: set it in one place (null out the other)" }}
{{- end }}
{{- if and .Values.kvTransfer.ucx.netDevices (hasKey $ucxEnv "UCX_NET_DEVICES") }}
{{- fail "UCX_NET_DEVICES is set in both kvTransfer.ucx.netDevices and pdserve.kv_transfer.ucx_env: set it in one place" }}
{{- end }}
{{- range $k, $v := .Values.kvTransfer.ucx.env }}
{{- if hasKey $ucxEnv $k }}
{{- fail (printf "%s is set in both kvTransfer.ucx.env and pdserve.kv_transfer.ucx_env: set it in one place" $k) }}
{{- end }}
{{- end }}
{{- /* Direct ingress would move HTTP off the proxies the Service, probes and KubeRay target. */}}
{{- $serveEnv := include "pdserve.leanServeEnv" . | fromJson }}
{{- range .Values.extraEnv }}
{{- if and (hasKey . "name") (hasKey . "value") }}{{ $_ := set $serveEnv .name (toString .value) }}{{ end }}
{{- end }}
{{- $directIngress := get $serveEnv "RAY_SERVE_ENABLE_DIRECT_INGRESS" }}
{{- if and (not (hasKey $serveEnv "RAY_SERVE_ENABLE_DIRECT_INGRESS")) (eq (get $serveEnv "RAY_SERVE_THROUGHPUT_OPTIMIZED") "1") }}
{{- $directIngress = "1" }}
{{- end }}
{{- if or (eq $directIngress "1") (eq (get $serveEnv "RAY_SERVE_ENABLE_HA_PROXY") "1") }}
{{- fail "extraEnv turns on Ray Serve's direct ingress (RAY_SERVE_ENABLE_DIRECT_INGRESS=1, RAY_SERVE_ENABLE_HA_PROXY=1, or RAY_SERVE_THROUGHPUT_OPTIMIZED=1 without RAY_SERVE_ENABLE_DIRECT_INGRESS=0): the router would then serve HTTP on a port Ray assigns per replica, not through the Serve proxies on pdserve.router.port that the router Service, the probes and KubeRay's health check use. Set serve.lean: true instead (everything else of the throughput mode, HTTP through the proxies; docs/deploy-kubernetes.md)" }}
{{- end }}
{{- if and .Values.networkPolicy.enabled .Values.kvTransfer.hostNetwork (not .Values.networkPolicy.nodeCIDRs) }}
{{- fail "kvTransfer.hostNetwork: worker pods then talk from their node's IP, which the NetworkPolicy's pod selector does not match on most network plugins, so the head would refuse them: list your nodes' CIDRs in networkPolicy.nodeCIDRs, or set networkPolicy.enabled=false" }}
{{- end }}
{{- end }}

{{/*
Ray Serve's lean path (serve.lean): the same mapping as
pdserve.serve_env.lean_serve_env(None) (tests/chart/test_lean_serve.py fails if they differ).
Direct ingress stays off: HTTP goes through the Serve proxies on pdserve.router.port, which the
router Service, the probes and KubeRay's proxy health check target (values.yaml: serve).
A JSON object; {} when serve.lean is off.
*/}}
{{- define "pdserve.leanServeEnv" -}}
{{- $serve := .Values.serve | default dict }}
{{- if $serve.lean }}
{{- toJson (dict
  "RAY_SERVE_THROUGHPUT_OPTIMIZED" "1"
  "RAY_SERVE_ENABLE_DIRECT_INGRESS" "0"
  "RAY_SERVE_CONTROL_LOOP_INTERVAL_S" "0.5"
  "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE" "1") }}
{{- else }}
{{- toJson dict }}
{{- end }}
{{- end }}

{{/* Environment shared by every Ray container. */}}
{{- define "pdserve.commonEnv" -}}
# The pod's own address (the node's with host networking): what engines should bind their
# listeners (KV-event publisher) to instead of every interface.
- name: PDSERVE_POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
# Ray starts workers (and so the engines) at nice 15 by default; as non-root they cannot
# lower it again, so start them at 0.
- name: RAY_worker_niceness
  value: "0"
{{- $lean := include "pdserve.leanServeEnv" . | fromJson }}
{{- $userEnv := list }}
{{- range .Values.extraEnv }}{{ $userEnv = append $userEnv .name }}{{ end }}
{{- if $lean }}
# Ray Serve's lean path (serve.lean; pdserve/serve_env.py), read by the
# Serve processes of this pod. A name also in extraEnv is left to extraEnv.
{{- end }}
{{- range $name := keys $lean | sortAlpha }}
{{- if not (has $name $userEnv) }}
- name: {{ $name }}
  value: {{ index $lean $name | quote }}
{{- end }}
{{- end }}
{{- if .Values.apiKey.existingSecret }}
- name: PDSERVE_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.apiKey.existingSecret }}
      key: {{ .Values.apiKey.key }}
{{- end }}
{{- if .Values.huggingface.tokenSecret }}
- name: HF_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.huggingface.tokenSecret }}
      key: {{ .Values.huggingface.tokenKey }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* UCX / NIXL environment for worker containers (engines run there). */}}
{{- define "pdserve.kvEnv" -}}
{{- with .Values.kvTransfer.ucx.tls }}
- name: UCX_TLS
  value: {{ . | quote }}
{{- end }}
{{- with .Values.kvTransfer.ucx.netDevices }}
- name: UCX_NET_DEVICES
  value: {{ . | quote }}
{{- end }}
{{- range $k, $v := .Values.kvTransfer.ucx.env }}
- name: {{ $k }}
  value: {{ $v | toString | quote }}
{{- end }}
{{- end }}

{{/* Container securityContext; IPC_LOCK when RDMA is on (RDMA registers pinned memory). */}}
{{- define "pdserve.securityContext" -}}
{{- $root := index . 0 }}
{{- $worker := index . 1 }}
{{- $sc := deepCopy ($root.Values.securityContext | default dict) }}
{{- if and $worker $root.Values.kvTransfer.rdma.enabled }}
{{- $caps := deepCopy ($sc.capabilities | default dict) }}
{{- $add := $caps.add | default list }}
{{- if not (has "IPC_LOCK" $add) }}{{ $add = append $add "IPC_LOCK" }}{{ end }}
{{- $_ := set $caps "add" $add }}
{{- $_ := set $sc "capabilities" $caps }}
{{- end }}
{{- if $sc }}
securityContext:
  {{- toYaml $sc | nindent 2 }}
{{- end }}
{{- end }}

{{/* The /dev/shm emptyDir (medium Memory) for a group. */}}
{{- define "pdserve.shmVolume" -}}
- name: dshm
  emptyDir:
    medium: Memory
    {{- with .sizeLimit }}
    sizeLimit: {{ . }}
    {{- end }}
{{- end }}
