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

# GKE's control plane calls admission webhooks and aggregated API servers on the pods' ports; on a
# private cluster it reaches only 443 and 10250 of the nodes by default. Every port it must reach is
# in deploy/RUNBOOK.md ("Control plane -> pods"), checked against this rule by the deploy tests:
#   9443  slurm-operator webhook (fails closed: without it every NodeSet/LoginSet change is refused)
#         and KEDA's admission webhooks
#   6443  KEDA's metrics API server (external.metrics.k8s.io): without it KEDA can move a NodeSet
#         0 -> 1 itself, but the HPA never reads the metric and never scales further
# Target tags cover the pods too: their addresses are alias ranges of the tagged nodes.
resource "google_compute_firewall" "control_plane_to_pods" {
  name          = "${var.cluster_name}-control-plane-to-pods"
  network       = google_compute_network.vpc.id
  direction     = "INGRESS"
  source_ranges = [var.master_ipv4_cidr_block]
  target_tags   = ["slurm-nodes"]
  allow {
    protocol = "tcp"
    ports    = ["6443", "9443"]
  }
}

# SSH from laptops on the site's VPN to the login pods behind the internal load balancer (deploy/slinky
# values.yaml: passthrough, client addresses kept). GKE adds its own rule for the LB's health checks.
resource "google_compute_firewall" "ssh_from_vpn" {
  name          = "${var.cluster_name}-login-ssh-from-vpn"
  network       = google_compute_network.vpc.id
  direction     = "INGRESS"
  source_ranges = var.ssh_client_cidrs
  target_tags   = ["slurm-nodes"]
  allow {
    protocol = "tcp"
    ports    = ["22"]
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
