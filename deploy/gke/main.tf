# GKE cluster: a CPU system pool for the Slurm control plane (slurmctld, slurmdbd, MariaDB,
# login, restapi, exporter) and one autoscaling-from-zero pool per GPU partition.

resource "google_container_cluster" "ml" {
  name     = var.cluster_name
  location = var.zone

  remove_default_node_pool = true
  initial_node_count       = 1
  deletion_protection      = true

  networking_mode = "VPC_NATIVE"
  ip_allocation_policy {}
  datapath_provider = "ADVANCED_DATAPATH" # Dataplane V2: enforces NetworkPolicy

  private_cluster_config {
    enable_private_nodes    = true
    enable_private_endpoint = false
    master_ipv4_cidr_block  = "172.16.0.0/28"
  }

  workload_identity_config {
    workload_pool = "${var.project}.svc.id.goog"
  }

  addons_config {
    gcs_fuse_csi_driver_config {
      enabled = true
    }
  }

  release_channel {
    channel = "REGULAR"
  }
}

resource "google_container_node_pool" "system" {
  name     = "system"
  cluster  = google_container_cluster.ml.id
  location = var.zone

  autoscaling {
    min_node_count = 2
    max_node_count = 4
  }

  node_config {
    machine_type = "e2-standard-8"
    labels       = { "slurmctl/role" = "system" }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    oauth_scopes = ["https://www.googleapis.com/auth/cloud-platform"]
  }
}

resource "google_container_node_pool" "gpu" {
  for_each = var.gpu_pools

  name     = each.key
  cluster  = google_container_cluster.ml.id
  location = var.zone

  initial_node_count = 0
  autoscaling {
    total_min_node_count = 0
    total_max_node_count = each.value.max_nodes
    location_policy      = each.value.queued_provisioning ? "ANY" : "BALANCED"
  }

  # h100-flex: Dynamic Workload Scheduler (flex-start / queued provisioning), at most 7 days a node
  dynamic "queued_provisioning" {
    for_each = each.value.queued_provisioning ? [1] : []
    content {
      enabled = true
    }
  }

  management {
    auto_repair  = true
    auto_upgrade = !each.value.queued_provisioning
  }

  node_config {
    machine_type = each.value.machine_type
    spot         = each.value.spot
    reservation_affinity {
      consume_reservation_type = each.value.queued_provisioning ? "NO_RESERVATION" : "ANY_RESERVATION"
    }
    guest_accelerator {
      type  = each.value.accelerator_type
      count = each.value.gpus_per_node
      gpu_driver_installation_config {
        gpu_driver_version = "LATEST"
      }
    }
    ephemeral_storage_local_ssd_config {
      # the gcsfuse file cache lives on local SSD (a3-highgpu-8g has 16, g2-standard-8 has 1)
      local_ssd_count = each.value.gpus_per_node == 8 ? 16 : 1
    }
    labels = {
      "slurmctl/pool"     = each.key
      "slurmctl/gpu-type" = each.value.accelerator_type
    }
    taint {
      key    = "slurmctl/pool"
      value  = each.key
      effect = "NO_SCHEDULE"
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    oauth_scopes = ["https://www.googleapis.com/auth/cloud-platform"]
  }
}
