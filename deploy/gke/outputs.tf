output "cluster" {
  value = google_container_cluster.ml.name
}

output "get_credentials" {
  value = "gcloud container clusters get-credentials ${google_container_cluster.ml.name} --zone ${var.zone} --project ${var.project}"
}

output "workload_service_account" {
  value = google_service_account.slurm_workloads.email
}

output "gpu_pools" {
  value = { for name, pool in var.gpu_pools : name => "${pool.max_nodes} x ${pool.gpus_per_node} ${pool.accelerator_type}" }
}

output "runs_filestore_ip" {
  value = google_filestore_instance.runs.networks[0].ip_addresses[0]
}
