/**
 * One canvas copy per painted region of a data grid, instead of one per cell.
 *
 * Lumino's DataGrid (under ipydatagrid: the dashboard's operator table) paints each visible cell into an
 * off-screen buffer canvas and copies that cell onto the canvas shown with a `drawImage` of its own. In
 * Chromium each copy from a canvas snapshots the whole buffer, about 1.5 ms whatever the cell's size, so a
 * paint of the table's 105 visible cells spent 150 ms copying, and the first load paints them twice.
 *
 * `coalesceCellCopies` wraps the grid's `_drawCells` (one region's cells: body, a header or the corner): while
 * it runs, the copies from the buffer are held back; at its end, when the held rectangles are disjoint and fill
 * their bounding box exactly (they do: a region's cells are laid side by side), that box is copied once, which
 * leaves the canvas with the same pixels. Anything else (a merged-cell gap, a copy to another place, a
 * rectangle of no size) replays the held copies one by one, in their order, as the grid made them.
 *
 * The grid's members used here are not public: the patch checks that they exist and leaves a grid whose
 * build lacks them as it is. Setting `globalThis.nbprecCellCopies = 'each'` turns coalescing off (to compare).
 */

/** A held copy: source x, y, width, height, then destination x, y (CSS pixels, as `_blitContent` takes them). */
type Copy = [number, number, number, number, number, number];

/** The members of Lumino's DataGrid this module relies on. */
interface GridInternals {
  _buffer: HTMLCanvasElement;
  _drawCells(region: unknown): void;
  _blitContent(source: HTMLCanvasElement, x: number, y: number, w: number, h: number, tx: number, ty: number): void;
}

const PATCHED = Symbol.for('nbprec.coalescedCellCopies');

/**
 * The one rectangle equal to the union of `copies` (each copied to where it was taken from), or null when
 * there is none: a copy that moves pixels or has no area, two that overlap, or a union that is not a box.
 */
export function unionBox(copies: Copy[]): [number, number, number, number] | null {
  let x0 = Infinity;
  let y0 = Infinity;
  let x1 = -Infinity;
  let y1 = -Infinity;
  let area = 0;
  for (const [x, y, w, h, tx, ty] of copies) {
    if (x !== tx || y !== ty || !(w > 0) || !(h > 0)) {
      return null;
    }
    x0 = Math.min(x0, x);
    y0 = Math.min(y0, y);
    x1 = Math.max(x1, x + w);
    y1 = Math.max(y1, y + h);
    area += w * h;
  }
  if (copies.length === 0 || area !== (x1 - x0) * (y1 - y0)) {
    return null;
  }
  for (let i = 0; i < copies.length; ++i) {
    const [ax, ay, aw, ah] = copies[i];
    for (let j = i + 1; j < copies.length; ++j) {
      const [bx, by, bw, bh] = copies[j];
      if (ax < bx + bw && bx < ax + aw && ay < by + bh && by < ay + ah) {
        return null; // overlapping copies: the area test proves nothing
      }
    }
  }
  return [x0, y0, x1 - x0, y1 - y0];
}

/** Patch `DataGrid.prototype` (Lumino's) once; false when its build lacks the members the patch needs. */
export function coalesceCellCopies(prototype: object): boolean {
  const proto = prototype as GridInternals & { [PATCHED]?: boolean };
  if (proto[PATCHED]) {
    return true;
  }
  const drawCells = proto._drawCells;
  const blit = proto._blitContent;
  if (typeof drawCells !== 'function' || typeof blit !== 'function') {
    return false;
  }
  proto._drawCells = function (this: GridInternals, region: unknown): void {
    const buffer = this._buffer;
    if (!(buffer instanceof HTMLCanvasElement) || (globalThis as any).nbprecCellCopies === 'each') {
      drawCells.call(this, region);
      return;
    }
    const held: Copy[] = [];
    const replay = (): void => {
      for (const [x, y, w, h, tx, ty] of held) {
        blit.call(this, buffer, x, y, w, h, tx, ty);
      }
      held.length = 0;
    };
    // an own property for the call's length, over the prototype's method
    this._blitContent = (source, x, y, w, h, tx, ty) => {
      if (source === buffer) {
        held.push([x, y, w, h, tx, ty]);
      } else {
        replay();
        blit.call(this, source, x, y, w, h, tx, ty);
      }
    };
    try {
      drawCells.call(this, region);
    } finally {
      delete (this as Partial<GridInternals>)._blitContent;
      const box = held.length > 1 ? unionBox(held) : null;
      if (box) {
        const [x, y, w, h] = box;
        blit.call(this, buffer, x, y, w, h, x, y);
      } else {
        replay();
      }
    }
  };
  proto[PATCHED] = true;
  return true;
}
