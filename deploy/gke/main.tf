# GKE cluster: a CPU system pool for the Slurm control plane (slurmctld, slurmdbd, MariaDB,
# login, restapi, exporter, operator) and one autoscaling-from-zero pool per GPU partition.
# Network, NAT, firewall and DNS: network.tf. Bucket and Workload Identity: storage.tf.

resource "google_container_cluster" "ml" {
  name     = var.cluster_name
  location = var.zone

  remove_default_node_pool = true
  initial_node_count       = 1
  deletion_protection      = true

  network         = google_compute_network.vpc.id
  subnetwork      = google_compute_subnetwork.nodes.id
  networking_mode = "VPC_NATIVE"
  ip_allocation_policy {
    cluster_secondary_range_name  = "pods"
    services_secondary_range_name = "services"
  }
  datapath_provider = "ADVANCED_DATAPATH" # Dataplane V2: enforces NetworkPolicy

  # The control plane keeps a public endpoint (so that kubectl/helm from an operator's VPN or CI
  # works without a bastion), but only the listed ranges reach it: without this block GKE accepts
  # API connections from any address (authenticated, yet exposed to every credential leak and bug).
  private_cluster_config {
    enable_private_nodes    = true
    enable_private_endpoint = false
    master_ipv4_cidr_block  = var.master_ipv4_cidr_block
  }

  master_authorized_networks_config {
    gcp_public_cidrs_access_enabled = false
    dynamic "cidr_blocks" {
      for_each = var.master_authorized_cidrs
      content {
        cidr_block   = cidr_blocks.value
        display_name = "operators ${cidr_blocks.value}"
      }
    }
  }

  workload_identity_config {
    workload_pool = "${var.project}.svc.id.goog"
  }

  addons_config {
    gcs_fuse_csi_driver_config {
      enabled = true
    }
  }

  # Release-channel clusters upgrade every pool: auto_upgrade must stay true on all of them.
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

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type    = "e2-standard-8"
    service_account = google_service_account.nodes.email
    labels          = { "slurmctl/role" = "system" }
    tags            = ["slurm-nodes"]
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
    # ANY vs BALANCED chooses among the node locations of a pool: this cluster is zonal (var.zone), so
    # every pool has one zone and both behave alike today. ANY is kept for flex-start and spot, where
    # taking capacity wherever it exists is what a regional cluster or added node_locations would want.
    location_policy = each.value.flex_start || each.value.spot ? "ANY" : "BALANCED"
  }

  management {
    # flex-start VMs are not repaired (GKE: a failed one is replaced by a new request instead)
    auto_repair  = !each.value.flex_start
    auto_upgrade = true
  }

  node_config {
    machine_type    = each.value.machine_type
    service_account = google_service_account.nodes.email
    spot            = each.value.spot
    # h100-flex: Dynamic Workload Scheduler flex-start. Plain pending pods (the Slinky NodeSet's
    # slurmd pods, scaled by KEDA) make the cluster autoscaler request VMs; no ProvisioningRequest.
    # A flex-start VM runs at most 7 days (the partition's MaxTime).
    flex_start       = each.value.flex_start ? true : null
    max_run_duration = each.value.flex_start ? "604800s" : null
    reservation_affinity {
      consume_reservation_type = each.value.flex_start ? "NO_RESERVATION" : "ANY_RESERVATION"
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
    tags = ["slurm-nodes"]
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

# The nodes' own identity (kubelet image pulls, logs, metrics); pods use Workload Identity instead.
resource "google_service_account" "nodes" {
  account_id   = "slurm-gke-nodes"
  display_name = "GKE nodes of the Slurm cluster"
}

resource "google_project_iam_member" "nodes" {
  for_each = toset([
    "roles/artifactregistry.reader",
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
    "roles/stackdriver.resourceMetadata.writer",
  ])
  project = var.project
  role    = each.key
  member  = "serviceAccount:${google_service_account.nodes.email}"
}
