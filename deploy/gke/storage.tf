# Checkpoint bucket + Workload Identity: the Slurm pods' Kubernetes service accounts read and write
# it through the gcsfuse CSI driver, with no node-wide key. deploy/chart creates slurm-login (login
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
