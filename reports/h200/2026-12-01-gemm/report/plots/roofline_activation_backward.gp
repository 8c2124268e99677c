# Written by `shapetune report`. Render: gnuplot DIR/plots/roofline_activation_backward.gp (from any directory).
here = ARG0[1:strlen(ARG0) - strlen("roofline_activation_backward.gp")]
data = here . "../data/"
reset
set terminal svg size 900,600 dynamic noenhanced font "sans,11" background rgb "white"
set output here . "roofline_activation_backward.svg"
set title "roofline: activation_backward (measured ceilings only)"
set logscale xy
set xlabel "arithmetic intensity (FLOP/byte)"
set ylabel "achieved FLOP/s"
set grid
set key top left
set xrange [0.229167:3.66667]
set yrange [7.84435e+11:6.24018e+13]
plot data . "roofline_activation_backward_winners.dat" using 1:2 with points pt 7 ps 1.2 title "winner", \
     4.25467e+12 * x with lines lw 2 title "DRAM copy ceiling (4.25 TB/s)"
