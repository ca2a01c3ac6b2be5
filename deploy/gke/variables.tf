variable "project" {
  type        = string
  description = "GCP project id"
}

variable "region" {
  type    = string
  default = "us-central1"
}

variable "zone" {
  type        = string
  default     = "us-central1-a"
  description = "GPU pools live in one zone (compact placement, H100/L4 capacity)"
}

variable "cluster_name" {
  type    = string
  default = "ml-gke"
}

# GPU pools: the names are the Slurm partitions and the Slinky NodeSets (one name each, checked
# by tests/unit/test_deploy_consistency.py). All scale from 0.
variable "gpu_pools" {
  type = map(object({
    machine_type     = string
    accelerator_type = string
    gpus_per_node    = number
    max_nodes        = number
    spot             = bool
    flex_start       = bool
  }))
  default = {
    "h100-ondemand" = { machine_type = "a3-highgpu-8g", accelerator_type = "nvidia-h100-80gb", gpus_per_node = 8, max_nodes = 6, spot = false, flex_start = false }
    "h100-spot"     = { machine_type = "a3-highgpu-8g", accelerator_type = "nvidia-h100-80gb", gpus_per_node = 8, max_nodes = 8, spot = true, flex_start = false }
    "h100-flex"     = { machine_type = "a3-highgpu-8g", accelerator_type = "nvidia-h100-80gb", gpus_per_node = 8, max_nodes = 6, spot = false, flex_start = true }
    "l4-dev"        = { machine_type = "g2-standard-8", accelerator_type = "nvidia-l4", gpus_per_node = 1, max_nodes = 4, spot = false, flex_start = false }
  }
}

variable "checkpoint_bucket" {
  type        = string
  description = "GCS bucket for runs and checkpoints (mounted with gcsfuse CSI)"
}

variable "runs_capacity_gb" {
  type        = number
  default     = 10240
  description = "Filestore (zonal) capacity for runs_root: run dirs and their checkpoints, in GiB (1024 minimum)"
}

variable "master_ipv4_cidr_block" {
  type        = string
  default     = "172.16.0.0/28"
  description = "GKE control plane range (private cluster): the source of webhook calls to the nodes"
}

variable "master_authorized_cidrs" {
  type        = list(string)
  description = "Public ranges (your operators' VPN egress, CI runners) that may reach the GKE API endpoint; nothing else can"
  validation {
    condition     = length(var.master_authorized_cidrs) > 0 && !contains(var.master_authorized_cidrs, "0.0.0.0/0")
    error_message = "master_authorized_cidrs: give the operators' egress ranges (e.g. [\"203.0.113.0/24\"]); 0.0.0.0/0 or none would leave the API open or unreachable."
  }
}

variable "ssh_client_cidrs" {
  type        = list(string)
  default     = ["10.200.0.0/16"]
  description = "Client range of the site's VPN into the VPC: the only sources that may SSH to the login pods' internal load balancer"
}

variable "slurm_namespace" {
  type    = string
  default = "slurm"
}
