package workers

// Checkpoint storage drivers for gocloud.dev/blob URLs. engine/checkpoint
// registers file:// and mem://; workers add the cloud ones so a node
// worker accepts s3:// (MinIO too), gs:// and azblob:// checkpoint URLs.
import (
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"
)
