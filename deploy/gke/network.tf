# The VPC the private cluster lives in. Private nodes have no public IP: Cloud NAT gives them
# egress (public images: ghcr.io, docker.io; pip), and Private Google Access + the googleapis.com
# zone keep Google APIs (GCS, Artifact Registry) on Google's network.

resource "google_compute_network" "vpc" {
  name                    = "${var.cluster_name}-vpc"
  auto_create_subnetworks = false
}

resource "google_compute_subnetwork" "nodes" {
  name                     = "${var.cluster_name}-nodes"
  region                   = var.region
  network                  = google_compute_network.vpc.id
  ip_cidr_range            = "10.10.0.0/20"
  private_ip_google_access = true
  secondary_ip_range {
    range_name    = "pods"
    ip_cidr_range = "10.64.0.0/14"
  }
  secondary_ip_range {
    range_name    = "services"
    ip_cidr_range = "10.68.0.0/20"
  }
}

resource "google_compute_router" "nat" {
  name    = "${var.cluster_name}-router"
  region  = var.region
  network = google_compute_network.vpc.id
}

resource "google_compute_router_nat" "nat" {
  name                               = "${var.cluster_name}-nat"
  router                             = google_compute_router.nat.name
  region                             = var.region
  nat_ip_allocate_option             = "AUTO_ONLY"
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"
  # many image layers from one node at scale-up: do not run out of ports
  min_ports_per_vm = 4096
  log_config {
    enable = true
    filter = "ERRORS_ONLY"
  }
}

# GKE's control plane calls admission webhooks on the pods' port. The slurm-operator webhook serves
# on 9443 and fails closed: without this rule every NodeSet/LoginSet create or update is refused.
# (GKE opens only 443 and 10250 from the control plane to private nodes by default.)
resource "google_compute_firewall" "webhook_from_control_plane" {
  name          = "${var.cluster_name}-slurm-operator-webhook"
  network       = google_compute_network.vpc.id
  direction     = "INGRESS"
  source_ranges = [var.master_ipv4_cidr_block]
  target_tags   = ["slurm-nodes"]
  allow {
    protocol = "tcp"
    ports    = ["9443"]
  }
}

# *.googleapis.com -> private.googleapis.com (199.36.153.8/30) inside the VPC
resource "google_dns_managed_zone" "googleapis" {
  name       = "${var.cluster_name}-googleapis"
  dns_name   = "googleapis.com."
  visibility = "private"
  private_visibility_config {
    networks {
      network_url = google_compute_network.vpc.id
    }
  }
}

resource "google_dns_record_set" "googleapis_private" {
  managed_zone = google_dns_managed_zone.googleapis.name
  name         = "private.googleapis.com."
  type         = "A"
  ttl          = 300
  rrdatas      = ["199.36.153.8", "199.36.153.9", "199.36.153.10", "199.36.153.11"]
}

resource "google_dns_record_set" "googleapis_wildcard" {
  managed_zone = google_dns_managed_zone.googleapis.name
  name         = "*.googleapis.com."
  type         = "CNAME"
  ttl          = 300
  rrdatas      = ["private.googleapis.com."]
}
