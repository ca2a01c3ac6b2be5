{{- define "slurmctl.labels" -}}
app.kubernetes.io/name: slurmctl
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The image by digest only: a tag can move under a running fleet. */}}
{{- define "slurmctl.image" -}}
{{- $image := required "image is required: the login image with slurmctl by digest (deploy/images/build)" .Values.image -}}
{{- if not (regexMatch "^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}$" $image) -}}
{{- fail (printf "image %q must be <registry>/<path>@sha256:<64 hex> (deploy/images/build prints it)" $image) -}}
{{- end -}}
{{- $image -}}
{{- end }}

{{/*
A pod that talks to Slurm as the login nodes do: sackd fetches slurm.conf from slurmctld (configless)
with the cluster's auth key, then slurmctl runs (the image's with-slurm entry point). It reads the run
dirs and the cost spool on the checkpoint bucket, so it runs as slurm-login (Workload Identity) with
the gcsfuse sidecar. `args` is the slurmctl command line.
*/}}
{{- define "slurmctl.slurmPod" -}}
{{- $root := index . 0 -}}
{{- $args := index . 1 -}}
{{- $extra := index . 2 -}}
metadata:
  labels:
    {{- include "slurmctl.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $extra.component }}
  annotations:
    gke-gcsfuse/volumes: "true"
spec:
  serviceAccountName: slurm-login
  {{- if $extra.restartPolicy }}
  restartPolicy: {{ $extra.restartPolicy }}
  {{- end }}
  nodeSelector: {cloud.google.com/gke-nodepool: system}
  containers:
    - name: slurmctl
      image: {{ include "slurmctl.image" $root }}
      imagePullPolicy: {{ $root.Values.imagePullPolicy }}
      command: ["/opt/slurmctl/bin/with-slurm", "/opt/slurmctl/venv/bin/slurmctl"]
      args:
        {{- toYaml $args | nindent 8 }}
      env:
        - {name: SLURM_CONF_SERVER, value: {{ $root.Values.slurm.confServer | quote }}}
        - {name: SLURMCTL_SITE_CONFIG, value: /etc/slurmctl/site.yaml}
      {{- with $extra.ports }}
      ports:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $extra.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - {name: slurm-key, mountPath: /etc/slurm/slurm.key, subPath: slurm.key, readOnly: true}
        - {name: site, mountPath: /etc/slurmctl, readOnly: true}
        - {name: runs, mountPath: /mnt/runs}
        - {name: checkpoints, mountPath: /mnt/checkpoints}
  volumes:
    - name: slurm-key
      secret:
        secretName: {{ $root.Values.slurm.keySecret.name }}
        defaultMode: 0400
        items: [{key: {{ $root.Values.slurm.keySecret.key }}, path: slurm.key}]
    - name: site
      configMap: {name: slurmctl-site}
    - name: runs
      persistentVolumeClaim: {claimName: {{ $root.Values.slurm.runsClaim }}}
    - name: checkpoints
      persistentVolumeClaim: {claimName: {{ $root.Values.slurm.checkpointsClaim }}}
{{- end }}
