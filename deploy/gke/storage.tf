# Shared bucket + Workload Identity: the Slurm pods' Kubernetes service accounts reach it through the
# gcsfuse CSI driver, with no node-wide key. It holds what every user may read (datasets, exports),
# never run dirs: see the Filestore instance below. deploy/chart creates slurm-login (login
# pods, exporter, cron jobs) and slurm-compute (slurmd pods), annotated with this account; the pods
# carry gke-gcsfuse/volumes: "true" (deploy/slinky/values.yaml).

resource "google_storage_bucket" "checkpoints" {
  name                        = var.checkpoint_bucket
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  # hierarchical namespace: atomic directory renames (checkpoint-N.tmp -> checkpoint-N)
  hierarchical_namespace {
    enabled = true
  }
  soft_delete_policy {
    retention_duration_seconds = 604800
  }
}

resource "google_service_account" "slurm_workloads" {
  account_id   = "slurm-workloads"
  display_name = "Slurm login and compute pods (Workload Identity)"
}

resource "google_storage_bucket_iam_member" "checkpoints_rw" {
  bucket = google_storage_bucket.checkpoints.name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${google_service_account.slurm_workloads.email}"
}

resource "google_service_account_iam_member" "workload_identity" {
  for_each           = toset(["slurm-login", "slurm-compute"])
  service_account_id = google_service_account.slurm_workloads.name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${var.project}.svc.id.goog[${var.slurm_namespace}/${each.key}]"
}

# Run directories (runs_root: run files AND their checkpoints) and the operators' data (cost
# records, ledger) live on Filestore, NOT in the bucket: NFS keeps each file's owner and mode, which
# is what keeps one user's runs from another (run dirs are 0700, the ledger 0600). gcsfuse has one
# owner and one mode per mount, and the bucket's Workload Identity token is the same for every user
# and job on a pod: no boundary between users can live there (SECURITY.md, "On GKE").
# The kubelet mounts it from the node network, so only the nodes' range is allowed; root is not
# squashed because the node hooks (root) write the cost records.
resource "google_filestore_instance" "runs" {
  name     = "${var.cluster_name}-runs"
  location = var.zone
  tier     = "ZONAL"

  file_shares {
    name        = "runs"
    capacity_gb = var.runs_capacity_gb
    nfs_export_options {
      ip_ranges   = [google_compute_subnetwork.nodes.ip_cidr_range]
      access_mode = "READ_WRITE"
      squash_mode = "NO_ROOT_SQUASH"
    }
  }

  networks {
    network = google_compute_network.vpc.name
    modes   = ["MODE_IPV4"]
  }
}
